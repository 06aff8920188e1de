"""What this machine has: the checks plug-ins declare they need, each with the command that fixes it.

Plug-ins (fault kinds, runtimes, rendezvous backends) return :class:`Check` objects from their
``machine_checks``; ``chaos doctor`` shows the union, and a run stops at validation with the same advice when one
it needs fails. The network probes live here because several plug-ins share them.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.net.capabilities import delay_mechanism, kernel_features, loss_mechanism

APT = "apt-get install -y"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # False: a better mechanism that has a working fallback (netem)


def net_checks(*wanted: str) -> list[Check]:
    """The network-fault probes (root, iproute2, nsenter, iptables, netem, NFQUEUE, statistic, tbf, mechanisms);
    with names given, only those."""
    f = kernel_features()
    checks = [
        Check("root", f["root"], "running as root" if f["root"] else "not root: namespaces and iptables need it",
              "run torch-chaos as root (sudo -E chaos ...)"),
        Check("iproute2 (ip, tc)", f["iproute2"], "present" if f["iproute2"] else "missing", f"{APT} iproute2"),
        Check("nsenter", f["nsenter"], "present" if f["nsenter"] else "missing", f"{APT} util-linux"),
        Check("iptables", f["iptables"], "present" if f["iptables"] else "missing", f"{APT} iptables"),
    ]
    if f["root"]:
        checks += [
            Check("tc netem", f["netem"], "kernel has sch_netem" if f["netem"] else
                  "no sch_netem in this kernel: delay uses NFQUEUE, loss uses iptables statistic",
                  "" if f["netem"] else "optional: modprobe sch_netem (or a kernel with CONFIG_NET_SCH_NETEM)",
                  required=False),
            Check("NFQUEUE + libnetfilter_queue", f["nfqueue"] and f["libnetfilter_queue"],
                  f"NFQUEUE target {'works' if f['nfqueue'] else 'missing'}, libnetfilter_queue "
                  f"{'found' if f['libnetfilter_queue'] else 'missing'}", f"{APT} libnetfilter-queue1"),
            Check("iptables statistic match", f["statistic"], "works" if f["statistic"] else "missing",
                  "a kernel with CONFIG_NETFILTER_XT_MATCH_STATISTIC"),
            Check("tc tbf", f["tbf"], "works" if f["tbf"] else "missing", "modprobe sch_tbf"),
            Check("delay mechanism", delay_mechanism() is not None, str(delay_mechanism() or "none"),
                  f"modprobe sch_netem, or {APT} libnetfilter-queue1"),
            Check("loss mechanism", loss_mechanism() is not None, str(loss_mechanism() or "none"),
                  "modprobe sch_netem, or a kernel with the iptables statistic match"),
        ]
    return [c for c in checks if c.name in wanted] if wanted else checks


def merge(checks: list[Check]) -> list[Check]:
    """One check per name, first one wins (several plug-ins ask for the same probe)."""
    seen: dict[str, Check] = {}
    for c in checks:
        seen.setdefault(c.name, c)
    return list(seen.values())
