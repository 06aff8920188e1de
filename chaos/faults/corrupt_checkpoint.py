"""Checkpoint damage on the storage: truncate, flip bytes in, or delete the newest checkpoint.

A truncated file is rejected by ``torch.load``, but flipped bytes in the middle load silently (measured, see
docs/design.md, "Runtimes and fault mechanisms"): only a digest recorded at save time catches them, which is
exactly what this fault tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaos.faults.base import FaultContext, FaultKind
from chaos.runtimes.base import CHECKPOINT_STORAGE
from chaos.spec import FaultSpec

_STEP = re.compile(r"(\d+)")
_SIDECAR_SUFFIXES = (".sha256", ".json", ".tmp")


def newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint with the highest step number in its name (mtime breaks ties and nameless cases)."""
    candidates = [p for p in directory.iterdir()
                  if p.is_file() and not p.name.startswith(".") and not p.name.endswith(_SIDECAR_SUFFIXES)]
    if not candidates:
        return None

    def key(p: Path) -> tuple[int, float]:
        numbers = _STEP.findall(p.name)
        return (int(numbers[-1]) if numbers else -1, p.stat().st_mtime)

    return max(candidates, key=key)


def damage(path: Path, mode: str) -> str:
    size = path.stat().st_size
    if mode == "delete":
        path.unlink()
        return f"deleted {path.name} ({size} bytes)"
    if mode == "truncate":
        os.truncate(path, size // 2)
        return f"truncated {path.name} from {size} to {size // 2} bytes"
    with open(path, "r+b") as f:
        f.seek(size // 2)
        chunk = f.read(16)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
        f.flush()
        os.fsync(f.fileno())
    return f"flipped {len(chunk)} bytes at offset {size // 2} of {path.name} ({size} bytes)"


class CorruptCheckpointOptions(FaultSpec):
    TARGET: ClassVar = "none"
    kind: Literal["corrupt_checkpoint"]
    mode: Literal["truncate", "flip", "delete"] = Field(
        "flip", description="how the newest checkpoint is damaged: flip 16 bytes in the middle (loads silently), "
        "truncate it to half, or delete it")

    @classmethod
    def target_hint(cls) -> str:
        return "corrupt_checkpoint acts on the checkpoint storage"


class CorruptCheckpoint(FaultKind):
    kind = "corrupt_checkpoint"
    options = CorruptCheckpointOptions
    summary = "the newest checkpoint file is damaged (flip, truncate or delete); shows at the next restart"
    needs = frozenset({CHECKPOINT_STORAGE})
    disruptive = False
    targets_node = False
    colour = "#9467bd"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"mode": draw(st.sampled_from(["flip", "truncate", "delete"]))}

    def inject(self, ctx: FaultContext) -> str:
        if ctx.checkpoint_dir is None or not ctx.checkpoint_dir.is_dir():
            raise RuntimeError("no checkpoint directory to corrupt (set workload.checkpoint_dir)")
        newest = newest_checkpoint(ctx.checkpoint_dir)
        if newest is None:
            raise RuntimeError(f"no checkpoint in {ctx.checkpoint_dir} yet")
        numbers = _STEP.findall(newest.name)
        ctx.details.update(path=str(newest), step=int(numbers[-1]) if numbers else None, mode=ctx.spec.mode)
        return damage(newest, ctx.spec.mode)
