"""Bandwidth: the node's egress is capped (a saturated uplink, a throttled cloud NIC)."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from chaos.faults.base import FaultContext, SweepAxis
from chaos.faults.netbase import NetworkFault, NetworkFaultSpec, impairment, mechanism_or_fail
from chaos.net.capabilities import kernel_features
from chaos.net.units import rate_bits
from chaos.spec import stored

# A burst of at least one full-size frame per timer tick, and a queue that holds 400 ms of traffic.
_BURST, _LATENCY = "32kbit", "400ms"
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")


class BandwidthOptions(NetworkFaultSpec):
    EXAMPLES: ClassVar = {"rate": "rate: 10mbit"}
    kind: Literal["bandwidth"]
    rate: str = Field(description="egress cap in tc units, e.g. 10mbit, 500kbit")

    @field_validator("rate")
    @classmethod
    def _tc_rate(cls, value: str, info: ValidationInfo) -> str:
        if not _RATE.match(value):
            raise ValueError(f"expected a tc rate such as 10mbit, 500kbit or 1gbit, got {value!r}")
        if float(re.match(r"[\d.]+", value)[0]) <= 0 and not stored(info):  # type: ignore[index]  (the pattern above starts with digits)
            raise ValueError(f"expected a rate above zero (a cut link is kind: isolate or partition), got {value!r}")
        return value


class Bandwidth(NetworkFault):
    kind = "bandwidth"
    options = BandwidthOptions
    summary = "the node's egress is capped at `rate` (a saturated uplink, a throttled cloud NIC)"
    mechanism_checks = ("tc tbf",)
    colour = "#e377c2"
    sweep_axis = SweepAxis(
        option="rate", examples="1gbit,100mbit,10mbit", badness=lambda value: -rate_bits(value),
        # a step that were all transfer slows as the bandwidth falls
        slowdown=lambda better, worse: rate_bits(better) / rate_bits(worse), unimpaired=lambda value: False,
        point_field="bits_per_s", point_value=rate_bits, x=rate_bits, log_x=True,
        x_label="link bandwidth per node (bit/s, tc tbf)",
        how="every node's link capped (bandwidth, netns, tc tbf, the whole run)")

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        mechanism_or_fail("tbf" if kernel_features()["tbf"] else None, "no tbf qdisc (sch_tbf)")
        imp = impairment(ctx, ctx.node, rate=ctx.spec.rate, mechanism="tbf")
        imp.add_root_qdisc(["tbf", "rate", ctx.spec.rate, "burst", _BURST, "latency", _LATENCY])
        return f"tc tbf rate {ctx.spec.rate} burst {_BURST} latency {_LATENCY} on {ctx.node}'s {imp.interface}"
