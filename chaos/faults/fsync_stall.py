"""Fsync stall: fsync on matching checkpoint files blocks until the fault is healed (after ``duration``, or at
the end of the run): a storage controller stuck flushing its cache, a network filesystem whose server stopped
answering.

A job that fsyncs its checkpoint (as it should) blocks inside the save; every other rank waits for it at the next
collective, so the whole job stops without an error. Without ``duration`` the run ends ``hung`` after
``limits.stall_timeout_s``.
"""

from __future__ import annotations

from typing import Any, Literal

from chaos.faults.base import FaultContext
from chaos.faults.storagebase import StorageFault, StorageFaultSpec, where


class FsyncStallOptions(StorageFaultSpec):
    kind: Literal["fsync_stall"]


class FsyncStall(StorageFault):
    kind = "fsync_stall"
    layer_effect = "stall_fsync"
    options = FsyncStallOptions
    summary = "fsync on matching checkpoint files blocks until healed (`duration`, or the run's end)"
    colour = "#dbdb8d"

    def text(self, ctx: FaultContext, node: str | None) -> str:
        until = f"for {ctx.spec.duration:g}s" if ctx.spec.duration is not None else "until the run ends"
        return f"fsync on {where(node, ctx.spec.paths)} blocks {until}"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        return {"duration": cls.generated_duration(draw, bounds)}
