"""I/O error: operations on matching checkpoint files fail with EIO (or a chosen errno): a failing disk, a
network filesystem that lost its server, a permission flip.

``ops`` chooses which operations fail (``write``, ``fsync``, ``read``, ``rename``, ``open``, ``open_write``,
``open_read``, ``unlink``); ``probability`` fails a fraction of them (the same draws for the same fault id, so a
run can be replayed); ``count`` fails only the first N. An fsync that fails is the case PostgreSQL learned the hard
way ("fsyncgate"): the data may be gone although the write succeeded.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from chaos.faults.base import FaultContext
from chaos.faults.storagebase import DEFAULT_OPS, StorageFault, StorageFaultSpec, StorageOp, where
from chaos.storage.rules import RuleError, errno_value


class IoErrorOptions(StorageFaultSpec):
    kind: Literal["io_error"]
    ops: list[StorageOp] = Field(default_factory=lambda: list(DEFAULT_OPS), min_length=1,
                                 description="operations that fail (open covers open_read and open_write)")
    errno: str = Field("EIO", description="the error they fail with, by name (EIO, ENOSPC, EROFS, EACCES, ...)")
    probability: float = Field(1.0, gt=0, le=1, description="fraction of matching operations that fail")
    count: int | None = Field(None, ge=1, description="fail only the first N matching operations")

    @field_validator("errno")
    @classmethod
    def _known(cls, value: str) -> str:
        try:
            errno_value(value)
        except RuleError as exc:
            raise ValueError(f"{exc}: expected an errno name such as EIO or EROFS") from None
        return value


class IoError(StorageFault):
    kind = "io_error"
    layer_effect = "error"
    options = IoErrorOptions
    summary = "operations on matching checkpoint files fail with EIO (or `errno`)"
    colour = "#c49c94"

    def rule(self, ctx: FaultContext) -> dict[str, Any]:
        spec = ctx.spec
        return {"ops": list(spec.ops), "errno": spec.errno, "probability": spec.probability, "count": spec.count}

    def text(self, ctx: FaultContext, node: str | None) -> str:
        spec = ctx.spec
        share = "" if spec.probability == 1 else f"{spec.probability:.0%} of "
        first = f" (the first {spec.count} only)" if spec.count else ""
        return f"{share}{'/'.join(spec.ops)} on {where(node, spec.paths)} fail with {spec.errno}{first}"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"ops": [draw(st.sampled_from(["write", "fsync", "read", "rename"]))],
                "duration": cls.generated_duration(draw, bounds)}
