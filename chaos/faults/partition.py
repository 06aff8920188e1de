"""Partition: two groups of nodes (or nodes and the rendezvous store) stop reaching each other.

A cut from A to B is a DROP rule in B's namespace for packets from A (ingress: silent, like a real cut), so
nothing is needed on the path between them. ``store`` means the rendezvous store: its own address when it is
dedicated, or node 0's address on the store port when node 0 hosts it (node 0's other traffic still flows).
A partial partition, two nodes cut from each other while both still reach the store, is the case torchelastic
handles worst: it regroups, hangs in the first collective and restarts until its restarts run out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, NetworkFaultSpec, impairment
from chaos.plan import STORE_NODE, Plan
from chaos.registry import launcher_of
from chaos.spec import NodeIndex

if TYPE_CHECKING:
    from collections.abc import Callable

    from chaos.net.impair import Impairment
    from chaos.scenario import Scenario

PartitionMember = NodeIndex | Literal["store"]


class PartitionOptions(NetworkFaultSpec):
    TARGET: ClassVar = "none"
    EXAMPLES: ClassVar = {"groups": "groups: [[0], [1, 2]]"}
    kind: Literal["partition"]
    groups: list[list[PartitionMember]] = Field(
        description="two groups of node indices (or 'store') that stop reaching each other, e.g. [[0], [1, 2]] "
        "or [[1], [store]]")
    one_way: bool = Field(False, description="cut traffic from the first group to the second only")

    @classmethod
    def target_hint(cls) -> str:
        return "partition takes groups, not a target; isolate cuts one node off everything"

    @field_validator("groups")
    @classmethod
    def _two_disjoint_groups(cls, groups: list[list[Any]]) -> list[list[Any]]:
        if len(groups) != 2 or not all(groups):
            raise ValueError("expected two non-empty groups, e.g. [[0], [1, 2]]")
        overlap = set(map(str, groups[0])) & set(map(str, groups[1]))
        if overlap:
            raise ValueError(f"{sorted(overlap)} cannot be on both sides of a partition")
        return groups


def _name(member: int | str) -> str:
    return "store" if member == "store" else f"node{member}"


class Partition(NetworkFault):
    kind = "partition"
    drop_rules_only = True
    options = PartitionOptions
    summary = "two groups of nodes (or nodes and the rendezvous store) stop reaching each other"
    targets_node = False
    colour = "#bcbd22"

    @classmethod
    def check(cls, spec: Any, scenario: Scenario) -> list[str]:
        c = scenario.cluster
        problems = []
        for member in [m for group in spec.groups for m in group]:
            if isinstance(member, int) and member >= c.nodes:
                problems.append(f"groups: node {member} does not exist (the cluster has nodes 0..{c.nodes - 1})")
            if member == "store" and not launcher_of(c).rendezvous:
                problems.append(f"groups: a {c.mode} job has no rendezvous store")
        if c.rendezvous.store == "node0" and any(
                "store" in side and 0 in other for side, other in (spec.groups, spec.groups[::-1])):
            problems.append("groups: node 0 hosts the rendezvous store (rendezvous.store: node0), so it cannot be "
                            "cut from it; use rendezvous.store: dedicated")
        return problems

    def impair(self, ctx: FaultContext) -> str:
        spec, plan = ctx.spec, ctx.plan
        assert plan is not None
        first, second = ([_name(m) for m in g] for g in spec.groups)
        pairs = [(a, b) for a in first for b in second]
        if not spec.one_way:
            pairs += [(b, a) for a, b in pairs]
        namespaces: dict[str, Impairment] = {}
        cuts = []
        for src, dst in pairs:
            where, match = self._cut(plan, src, dst, ctx.runtime.net_address)
            if where not in namespaces:
                namespaces[where] = impairment(ctx, where)
            namespaces[where].add_rule("INPUT", [*match, "-j", "DROP"])
            cuts.append(f"{src}->{dst}")
        ctx.details.pop("interface", None)
        ctx.details.update(mechanism="iptables DROP", cuts=cuts, groups=[first, second], one_way=spec.one_way)
        direction = "one way" if spec.one_way else "both ways"
        by = ctx.runtime.net_by()
        return (f"iptables DROP between {'+'.join(first)} and {'+'.join(second)} ({direction}; rules in "
                f"{', '.join(ctx.runtime.net_where(n) for n in sorted(namespaces))}{f', by {by}' if by else ''})")

    @staticmethod
    def _cut(plan: Plan, src: str, dst: str, address: Callable[[Plan, str], str] | None = None
             ) -> tuple[str, list[str]]:
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
        match = ["-s", address(plan, src_node) if address is not None else plan.addresses[src_node]]
        if dst == "store" and host == "node0":
            match += ["-p", "tcp", "--dport", port]
        if src == "store" and host == "node0":
            match += ["-p", "tcp", "--sport", port]
        return dst_node, match
