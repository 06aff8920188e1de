"""Isolate: the node loses its network entirely (a pulled cable, a dead top-of-rack port) but keeps running.

Every drop is silent and on ingress: nothing reaches the node, and every other endpoint (nodes, a dedicated
store) drops what comes from it. A DROP in OUTPUT would instead hand the node's sockets an immediate EPERM, so
connects would fail fast where a real dead link makes them time out.
"""

from __future__ import annotations

from typing import Any, Literal

from chaos.faults.base import FaultContext, draw_duration
from chaos.faults.netbase import NetworkFault, NetworkFaultSpec, impairment


class IsolateOptions(NetworkFaultSpec):
    kind: Literal["isolate"]


class Isolate(NetworkFault):
    kind = "isolate"
    drop_rules_only = True
    options = IsolateOptions
    summary = "the node loses its network entirely but keeps running (a pulled cable)"
    colour = "#17becf"
    acts_on_store = True

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.plan is not None
        imp = impairment(ctx, ctx.node, mechanism="iptables DROP")
        imp.add_rule("INPUT", ["-i", imp.interface, "-j", "DROP"])
        address = ctx.runtime.net_address(ctx.plan, ctx.node)
        skipped = []
        for peer in ctx.plan.addresses:
            if peer == ctx.node:
                continue
            try:
                other = impairment(ctx, peer)
            except RuntimeError as exc:  # a peer that is down right now (its replacement will not drop)
                skipped.append(f"{peer}: {exc}")
                continue
            other.add_rule("INPUT", ["-s", address, "-j", "DROP"])
        ctx.details["interface"] = imp.interface
        if skipped:
            ctx.details["not_applied_on"] = skipped
        by = ctx.runtime.net_by()
        return (f"iptables DROP of everything {ctx.runtime.net_where(ctx.node)} receives ({imp.interface}) and of "
                f"everything from {address} at its peers{f', by {by}' if by else ''}")

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        return {"duration": draw_duration(draw, bounds)}
