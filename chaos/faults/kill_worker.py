"""Worker crash: the training processes die (OOM kill, segfault) while the launcher survives and restarts them."""

from __future__ import annotations

from typing import Any, Literal

from chaos.capabilities import KILL_WORKERS
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec


class KillWorkerOptions(FaultSpec):
    kind: Literal["kill_worker"]


class KillWorker(FaultKind):
    kind = "kill_worker"
    options = KillWorkerOptions
    summary = "the node's worker processes are SIGKILLed; its launcher lives and restarts them"
    needs = frozenset({KILL_WORKERS})
    # torchrun restarts the workers it lost, which resume from the checkpoint
    clean_resume_layouts = frozenset({"elastic"})
    colour = "#ff7f0e"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.kill_workers(ctx.node)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        return {}
