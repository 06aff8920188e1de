"""What this machine can run, and the exact command that fixes each missing piece.

``chaos doctor`` prints every check; :func:`unmet` gives the subset a scenario needs, so a run that cannot work
stops at validation with the same advice instead of failing halfway through.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from chaos.plan import PlanError
from chaos.scenario import NETWORK_FAULTS, Scenario


class MachineUnfit(PlanError):
    """The scenario is valid but needs something this machine lacks (exit code 2, with the fix)."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # False: a better mechanism that has a working fallback (netem)


def _docker_checks(image: str | None = None) -> list[Check]:
    from chaos.image import image_tag
    from chaos.runtimes.docker import DockerUnavailable, client

    tag = image or image_tag()
    try:
        c = client()
    except DockerUnavailable as exc:
        return [Check("docker engine", False, str(exc).split(";")[0],
                      "apt-get install -y docker.io && (dockerd > /var/log/dockerd.log 2>&1 &)"),
                Check("docker image", False, f"{tag}: cannot tell without an engine", "chaos image build")]
    version = c.version().get("Version", "?")
    present = bool(c.api.images(name=tag))
    return [Check("docker engine", True, f"reachable, version {version}"),
            Check("docker image", present, f"{tag} {'built' if present else 'not built'}",
                  "" if present else "chaos image build")]


def _net_checks() -> list[Check]:
    from chaos.net.capabilities import delay_mechanism, kernel_features, loss_mechanism

    f = kernel_features()
    apt = "apt-get install -y"
    checks = [
        Check("root", f["root"], "running as root" if f["root"] else "not root: namespaces and iptables need it",
              "run torch-chaos as root (sudo -E chaos ...)"),
        Check("iproute2 (ip, tc)", f["iproute2"], "present" if f["iproute2"] else "missing", f"{apt} iproute2"),
        Check("nsenter", f["nsenter"], "present" if f["nsenter"] else "missing", f"{apt} util-linux"),
        Check("iptables", f["iptables"], "present" if f["iptables"] else "missing", f"{apt} iptables"),
    ]
    if not f["root"]:
        return checks
    checks += [
        Check("tc netem", f["netem"], "kernel has sch_netem" if f["netem"] else
              "no sch_netem in this kernel: delay uses NFQUEUE, loss uses iptables statistic",
              "" if f["netem"] else "optional: modprobe sch_netem (or a kernel with CONFIG_NET_SCH_NETEM)",
              required=False),
        Check("NFQUEUE + libnetfilter_queue", f["nfqueue"] and f["libnetfilter_queue"],
              f"NFQUEUE target {'works' if f['nfqueue'] else 'missing'}, libnetfilter_queue "
              f"{'found' if f['libnetfilter_queue'] else 'missing'}", f"{apt} libnetfilter-queue1"),
        Check("iptables statistic match", f["statistic"], "works" if f["statistic"] else "missing",
              "a kernel with CONFIG_NETFILTER_XT_MATCH_STATISTIC"),
        Check("tc tbf", f["tbf"], "works" if f["tbf"] else "missing", "modprobe sch_tbf"),
        Check("delay mechanism", delay_mechanism() is not None, str(delay_mechanism() or "none"),
              f"modprobe sch_netem, or {apt} libnetfilter-queue1"),
        Check("loss mechanism", loss_mechanism() is not None, str(loss_mechanism() or "none"),
              "modprobe sch_netem, or a kernel with the iptables statistic match"),
    ]
    return checks


def machine_checks() -> list[Check]:
    checks = _net_checks()
    checks.append(Check("debootstrap (offline image build)", shutil.which("debootstrap") is not None,
                        "present" if shutil.which("debootstrap") else "missing", "apt-get install -y debootstrap"))
    return checks + _docker_checks()


_NEEDS = {"delay": "delay mechanism", "loss": "loss mechanism", "bandwidth": "tc tbf",
          "partition": "iptables", "isolate": "iptables"}


def unmet(scenario: Scenario) -> list[Check]:
    """The checks this scenario needs that fail on this machine (empty: it can run here)."""
    c = scenario.cluster
    kinds = {f.kind for f in scenario.faults}
    if c.runtime == "local" and not kinds & set(NETWORK_FAULTS):
        return []
    wanted = set()
    if c.runtime == "netns":
        wanted |= {"root", "iproute2 (ip, tc)", "nsenter"}
    if kinds & set(NETWORK_FAULTS):
        wanted |= {"root", "nsenter", "iptables", "iproute2 (ip, tc)"}
        wanted |= {_NEEDS[k] for k in kinds if k in _NEEDS}
    checks = _net_checks() if wanted else []
    if c.runtime == "docker":
        checks += _docker_checks(c.docker.image)
        wanted |= {"docker engine", "docker image"}
    return [ch for ch in checks if ch.name in wanted and not ch.ok]


def advice(problems: list[Check]) -> str:
    lines = ["this machine cannot run it yet (`chaos doctor` shows every check):"]
    lines += [f"  - {p.name}: {p.detail}; fix: {p.fix}" for p in problems]
    return "\n".join(lines)


def require(scenario: Scenario) -> None:
    problems = unmet(scenario)
    if problems:
        raise MachineUnfit(advice(problems))
