"""Bandwidth: the node's egress is capped (a saturated uplink, a throttled cloud NIC)."""

from __future__ import annotations

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, impairment
from chaos.net.capabilities import kernel_features

# A burst of at least one full-size frame per timer tick, and a queue that holds 400 ms of traffic.
_BURST, _LATENCY = "32kbit", "400ms"


class Bandwidth(NetworkFault):
    kind = "bandwidth"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.spec.rate is not None
        if not kernel_features()["tbf"]:
            raise RuntimeError("this kernel has no tbf qdisc (sch_tbf); run `chaos doctor` for the fix")
        imp = impairment(ctx, ctx.node)
        ctx.handles.append(imp)
        ctx.details.update(rate=ctx.spec.rate, mechanism="tbf", interface=imp.interface)
        imp.add_root_qdisc(["tbf", "rate", ctx.spec.rate, "burst", _BURST, "latency", _LATENCY])
        return f"tc tbf rate {ctx.spec.rate} burst {_BURST} latency {_LATENCY} on {ctx.node}'s {imp.interface}"
