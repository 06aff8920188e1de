"""Isolate: the node loses its network entirely (a pulled cable, a dead top-of-rack port) but keeps running."""

from __future__ import annotations

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, impairment


class Isolate(NetworkFault):
    kind = "isolate"

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        imp = impairment(ctx, ctx.node, mechanism="iptables DROP")
        imp.add_rule("INPUT", ["-i", imp.interface, "-j", "DROP"])
        imp.add_rule("OUTPUT", ["-o", imp.interface, "-j", "DROP"])
        return f"iptables DROP of everything in and out of {ctx.node}'s {imp.interface}"
