"""Bandwidth: the node's egress is capped (a saturated uplink, a throttled cloud NIC)."""

from __future__ import annotations

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, impairment, mechanism_or_fail
from chaos.net.capabilities import kernel_features

# A burst of at least one full-size frame per timer tick, and a queue that holds 400 ms of traffic.
_BURST, _LATENCY = "32kbit", "400ms"


class Bandwidth(NetworkFault):
    kind = "bandwidth"

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.spec.rate is not None
        mechanism_or_fail("tbf" if kernel_features()["tbf"] else None, "no tbf qdisc (sch_tbf)")
        imp = impairment(ctx, ctx.node, rate=ctx.spec.rate, mechanism="tbf")
        imp.add_root_qdisc(["tbf", "rate", ctx.spec.rate, "burst", _BURST, "latency", _LATENCY])
        return f"tc tbf rate {ctx.spec.rate} burst {_BURST} latency {_LATENCY} on {ctx.node}'s {imp.interface}"
