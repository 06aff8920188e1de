"""Partition: two groups of nodes (or nodes and the rendezvous store) stop reaching each other.

A cut from A to B is a DROP rule in B's namespace for packets from A (ingress: silent, like a real cut), so
nothing is needed on the path between them. ``store`` means the rendezvous store: its own address when it is
dedicated, or node 0's address on the store port when node 0 hosts it (node 0's other traffic still flows).
A partial partition, two nodes cut from each other while both still reach the store, is the case torchelastic
handles worst: it regroups, hangs in the first collective and restarts until its restarts run out.
"""

from __future__ import annotations

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, impairment
from chaos.net.impair import Impairment
from chaos.plan import STORE_NODE, Plan


def _name(member: int | str) -> str:
    return "store" if member == "store" else f"node{member}"


class Partition(NetworkFault):
    kind = "partition"
    targets_node = False

    def impair(self, ctx: FaultContext) -> str:
        spec, plan = ctx.spec, ctx.plan
        assert spec.groups is not None and plan is not None
        first, second = ([_name(m) for m in g] for g in spec.groups)
        pairs = [(a, b) for a in first for b in second]
        if not spec.one_way:
            pairs += [(b, a) for a, b in pairs]
        namespaces: dict[str, Impairment] = {}
        cuts = []
        for src, dst in pairs:
            where, match = self._cut(plan, src, dst)
            if where not in namespaces:
                namespaces[where] = impairment(ctx, where)
            namespaces[where].add_rule("INPUT", [*match, "-j", "DROP"])
            cuts.append(f"{src}->{dst}")
        ctx.details.pop("interface", None)
        ctx.details.update(mechanism="iptables DROP", cuts=cuts, groups=[first, second], one_way=spec.one_way)
        direction = "one way" if spec.one_way else "both ways"
        return (f"iptables DROP between {'+'.join(first)} and {'+'.join(second)} ({direction}; rules in "
                f"{', '.join(sorted(namespaces))})")

    @staticmethod
    def _cut(plan: Plan, src: str, dst: str) -> tuple[str, list[str]]:
        """Which namespace drops src->dst traffic (the receiver's, on ingress: silent, like a real cut; a DROP in
        the sender's OUTPUT would fail its connects at once with EPERM), and the iptables match for it."""
        host = plan.store_host
        if host is None and "store" in (src, dst):
            raise ValueError("a centralized job has no rendezvous store to partition from")
        port = str(plan.store_port)
        resolve = {"store": STORE_NODE if host == STORE_NODE else "node0"}
        src_node, dst_node = resolve.get(src, src), resolve.get(dst, dst)
        if src_node == dst_node:
            raise ValueError(f"{src} and {dst} share node0's network stack (node 0 hosts the store); "
                             "use rendezvous.store: dedicated to partition them")
        match = ["-s", plan.addresses[src_node]]
        if dst == "store" and host == "node0":
            match += ["-p", "tcp", "--dport", port]
        if src == "store" and host == "node0":
            match += ["-p", "tcp", "--sport", port]
        return dst_node, match
