"""Worker crash: the training processes die (OOM kill, segfault) while the launcher survives and restarts them."""

from __future__ import annotations

from chaos.faults.base import FaultContext, FaultKind


class KillWorker(FaultKind):
    kind = "kill_worker"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.kill_workers(ctx.node)
