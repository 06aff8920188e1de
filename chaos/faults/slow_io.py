"""Slow storage: every matching operation waits ``latency``, and reads and writes share a ``bandwidth`` cap: a
busy network filesystem, a throttled cloud volume, a disk rebuilding its RAID.

The cap is one queue per fault (a token bucket without burst): two writers at once each get half. The effect on
the job is measured, not assumed: step time and goodput while the fault lasts (``slowdown``, ``goodput``), since a
job that saves synchronously stalls training for every slow save.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from chaos.faults.base import FaultContext
from chaos.faults.storagebase import DEFAULT_OPS, PositiveBytes, StorageFault, StorageFaultSpec, StorageOp, where
from chaos.spec import Seconds


class SlowIoOptions(StorageFaultSpec):
    kind: Literal["slow_io"]
    latency: Seconds | None = Field(None, description="added to every matching operation, e.g. 50ms")
    bandwidth: PositiveBytes | None = Field(None, description="bytes per second for reads and writes together, "
                                    "e.g. 20MB/s")
    ops: list[StorageOp] = Field(default_factory=lambda: list(DEFAULT_OPS), min_length=1,
                                 description="operations the latency applies to (the cap: reads and writes)")

    @model_validator(mode="after")
    def _something(self) -> SlowIoOptions:
        if self.latency is None and self.bandwidth is None:
            raise ValueError("slow_io needs latency and/or bandwidth, e.g. latency: 50ms or bandwidth: 20MB/s")
        return self


class SlowIo(StorageFault):
    kind = "slow_io"
    layer_effect = "slow"
    options = SlowIoOptions
    summary = "matching storage operations wait `latency`; reads and writes share a `bandwidth` cap"
    colour = "#bcbd22"

    def rule(self, ctx: FaultContext) -> dict[str, Any]:
        spec = ctx.spec
        return {"ops": list(spec.ops), "latency_ms": (spec.latency or 0.0) * 1000, "bandwidth_bps": spec.bandwidth}

    def text(self, ctx: FaultContext, node: str | None) -> str:
        spec = ctx.spec
        parts = []
        if spec.latency:
            parts.append(f"{'/'.join(spec.ops)} wait {spec.latency * 1000:g}ms")
        if spec.bandwidth:
            parts.append(f"reads and writes capped at {spec.bandwidth} B/s")
        return f"on {where(node, spec.paths)}: " + ", ".join(parts)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"latency": draw(st.sampled_from([0.01, 0.05, 0.2])), "duration": cls.generated_duration(draw, bounds)}
