"""Delay: every packet the node sends waits ``delay`` (± ``jitter``): a slow or distant link.

``tc netem`` on egress where the kernel has it; otherwise (no ``sch_netem``, as on this project's CI kernel)
iptables sends the node's *ingress* to an NFQUEUE that :mod:`chaos.net.delayer` releases after the delay. Ingress,
not egress: a queued outgoing packet still counts against its socket's TCP small-queue budget, which let a bulk
sender through at ~2 packets per delay (measured); a received packet is detached from any socket first. Every
round trip through the node still gains the delay once. The delayer keeps packet order (netem with jitter
reorders); the mechanism used is recorded in the history.
"""

from __future__ import annotations

import os
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from chaos.faults.base import FaultContext, SweepAxis
from chaos.faults.netbase import NetworkFault, NetworkFaultSpec, impairment, mechanism_or_fail
from chaos.marks import DELAYERS, ENGINE_VAR, TREE_VAR, engine_mark
from chaos.net.capabilities import delay_mechanism
from chaos.net.impair import start_delayer
from chaos.net.units import delay_seconds
from chaos.spec import Seconds, stored

QUEUE = 7


MAX_DELAY_S = 60.0


class DelayOptions(NetworkFaultSpec):
    EXAMPLES: ClassVar = {"delay": "delay: 100ms"}
    kind: Literal["delay"]
    delay: Seconds = Field(description="added to every packet the node sends, e.g. 100ms (at most 60s)")
    jitter: Seconds | None = Field(None, description="uniform +- spread, e.g. 10ms (at most 60s)")

    @field_validator("delay", "jitter")
    @classmethod
    def _at_most_a_minute(cls, value: float | None, info: ValidationInfo) -> float | None:
        # a packet held longer is a cut link (kind: isolate); the delayer's queue would hold every packet meanwhile
        if value is not None and value > MAX_DELAY_S and not stored(info):
            raise ValueError(f"at most {MAX_DELAY_S:g}s (a longer hold is a cut link: kind isolate), got {value:g}s")
        return value


class Delay(NetworkFault):
    kind = "delay"
    options = DelayOptions
    summary = "every packet through the node waits `delay` (± `jitter`): a slow or distant link"
    mechanism_checks = ("delay mechanism",)
    colour = "#2ca02c"
    sweep_axis = SweepAxis(
        option="delay", examples="0ms,5ms,20ms", badness=delay_seconds,
        # a step that were all round trips slows as the delay grows (1 ms stands for the unimpaired link's own)
        slowdown=lambda better, worse: (delay_seconds(worse) + 1e-3) / (delay_seconds(better) + 1e-3),
        unimpaired=lambda value: delay_seconds(value) == 0, point_field="delay_s", point_value=delay_seconds,
        x=lambda value: delay_seconds(value) * 1000, log_x=False,
        x_label="delay added to every packet of every node (ms)",
        how="every node's packets delayed (delay, netns, the delay fault's mechanism, the whole run; 0: no fault)")

    def impair(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.spec.delay is not None
        delay_ms, jitter_ms = ctx.spec.delay * 1000, (ctx.spec.jitter or 0.0) * 1000
        mechanism = mechanism_or_fail(delay_mechanism(), "neither sch_netem nor NFQUEUE with libnetfilter_queue")
        imp = impairment(ctx, ctx.node, delay_ms=delay_ms, jitter_ms=jitter_ms, mechanism=mechanism)
        if mechanism == "netem":
            imp.add_root_qdisc(["netem", "delay", f"{delay_ms:g}ms", f"{jitter_ms:g}ms"])
            return f"tc netem delay {delay_ms:g}ms ±{jitter_ms:g}ms on {ctx.node}'s {imp.interface}"
        run_id = ctx.plan.run_id if ctx.plan is not None else "run"
        env = {**os.environ, TREE_VAR: f"{run_id}/{DELAYERS}/{ctx.fault_id}", ENGINE_VAR: engine_mark()}
        imp.delayer = start_delayer(imp.enter, QUEUE, delay_ms, jitter_ms, env)
        imp.add_rule("INPUT", ["-i", imp.interface, "-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"],
                     last=True)
        return (f"iptables NFQUEUE {QUEUE} + userspace delayer {delay_ms:g}ms ±{jitter_ms:g}ms on {ctx.node}'s "
                f"ingress ({imp.interface}; no sch_netem in this kernel)")
