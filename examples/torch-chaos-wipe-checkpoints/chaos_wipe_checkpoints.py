"""A fault kind that is not built into torch-chaos: the checkpoint volume loses its files.

It models a storage incident (a volume re-provisioned empty, a clean-up job with the wrong pattern): every
checkpoint file except the ``keep_newest`` newest ones disappears. Like ``corrupt_checkpoint`` it interrupts
nothing by itself; its effect shows at the next restart, when the job must resume from an older checkpoint or from
scratch. Pair it with a crash to measure what that costs.

Everything torch-chaos needs to know about the kind is declared here: the options model (scenario schema and
validation), the runtime capability it needs, how ``chaos explore`` may generate it and how reports draw it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaos.plugin import CHECKPOINT_STORAGE, FaultContext, FaultKind, FaultSpec


class WipeCheckpointsOptions(FaultSpec):
    TARGET: ClassVar = "none"  # it acts on the checkpoint storage, not on a node
    kind: Literal["wipe_checkpoints"]
    keep_newest: int = Field(0, ge=0, description="how many of the newest checkpoint files survive")

    @classmethod
    def target_hint(cls) -> str:
        return "wipe_checkpoints acts on the checkpoint storage"


def checkpoint_files(directory: Path) -> list[Path]:
    """Regular files directly in the directory, oldest first; links and sub-directories are never touched."""
    files = [p for p in directory.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith(".")]
    return sorted(files, key=lambda p: p.stat().st_mtime)


class WipeCheckpoints(FaultKind):
    kind = "wipe_checkpoints"
    options = WipeCheckpointsOptions
    summary = "every checkpoint file but the keep_newest newest is deleted (a lost volume); shows at the next restart"
    needs = frozenset({CHECKPOINT_STORAGE})
    disruptive = False
    targets_node = False
    colour = "#7b4173"

    def inject(self, ctx: FaultContext) -> str:
        directory = ctx.checkpoint_dir
        if directory is None or not directory.is_dir():
            raise RuntimeError("no checkpoint directory to wipe (set workload.checkpoint_dir)")
        files = checkpoint_files(directory)
        keep = ctx.spec.keep_newest
        doomed = files[:-keep] if keep else files
        for path in doomed:
            path.unlink()
        # `paths`: the checkpoint files this fault made unavailable, so the checkpoint checker no longer counts
        # them as valid resume points (docs/design.md, "The history").
        ctx.details.update(paths=[str(p) for p in doomed], kept=[p.name for p in files[len(doomed):]])
        return f"deleted {len(doomed)} of {len(files)} file(s) in {directory.name}/ (kept the {keep} newest)"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"keep_newest": draw(st.integers(0, 1))}
