"""Loss: a share of the node's packets is dropped (a flaky NIC, a congested switch).

``tc netem loss`` drops on egress. The iptables fallback drops on *ingress*: a DROP in OUTPUT hands the sending
socket an error (EPERM) instead of a silent loss, which TCP does not treat like a lost segment.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from chaos.faults.base import FaultContext
from chaos.faults.netbase import NetworkFault, NetworkFaultSpec, impairment, mechanism_or_fail
from chaos.net.capabilities import loss_mechanism


class LossOptions(NetworkFaultSpec):
    EXAMPLES: ClassVar = {"loss_percent": "loss_percent: 10"}
    kind: Literal["loss"]
    loss_percent: float = Field(gt=0, le=100, description="share of packets dropped")


class Loss(NetworkFault):
    kind = "loss"
    options = LossOptions
    summary = "a share of the node's packets is dropped (a flaky NIC, a congested switch)"
    mechanism_checks = ("loss mechanism",)
    colour = "#8c564b"

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.spec.loss_percent is not None
        percent = ctx.spec.loss_percent
        mechanism = mechanism_or_fail(loss_mechanism(), "neither sch_netem nor the iptables statistic match")
        imp = impairment(ctx, ctx.node, loss_percent=percent, mechanism=mechanism)
        if mechanism == "netem":
            imp.add_root_qdisc(["netem", "loss", f"{percent:g}%"])
            return f"tc netem loss {percent:g}% on {ctx.node}'s {imp.interface}"
        imp.add_rule("INPUT", ["-i", imp.interface, "-m", "statistic", "--mode", "random", "--probability",
                               f"{percent / 100:.6f}", "-j", "DROP"])
        return f"iptables statistic match: drop {percent:g}% of what {ctx.node} receives on {imp.interface}"
