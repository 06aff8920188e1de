"""Disk full: writes to the checkpoint storage fail with ENOSPC, at once or once ``after_bytes`` more were written.

What a job meets when its checkpoint volume fills up in the middle of a save: ``torch.save`` raises (with the
``OSError`` often only in ``__context__``, docs/design.md, "Runtimes and fault mechanisms") and leaves a partial
file. An atomic save (temporary file, rename) keeps the previous checkpoint whole; a save straight to the final
name leaves a torn file where the next start looks. Deleting files frees nothing: the disk was filled by someone
else. ``duration`` models the space coming back (an operator or a cleanup job).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chaos.faults.base import FaultContext
from chaos.faults.storagebase import Bytes, StorageFault, StorageFaultSpec, where


class DiskFullOptions(StorageFaultSpec):
    kind: Literal["disk_full"]
    after_bytes: Bytes = Field(0, description="bytes that still fit after the injection (e.g. 10MB); 0: the "
                               "next write fails")


class DiskFull(StorageFault):
    kind = "disk_full"
    layer_effect = "quota"
    options = DiskFullOptions
    summary = "writes to the checkpoint storage fail with ENOSPC (now, or after `after_bytes` more)"
    colour = "#8c564b"

    def rule(self, ctx: FaultContext) -> dict[str, Any]:
        return {"after_bytes": ctx.spec.after_bytes}

    def text(self, ctx: FaultContext, node: str | None) -> str:
        room = f"after {ctx.spec.after_bytes} more bytes" if ctx.spec.after_bytes else "from now"
        return f"writes to {where(node, ctx.spec.paths)} fail with ENOSPC {room}"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"after_bytes": draw(st.sampled_from([0, 2**20])), "duration": cls.generated_duration(draw, bounds)}
