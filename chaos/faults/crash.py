"""Node crash: the whole node disappears at once, as when a machine loses power."""

from __future__ import annotations

from chaos.faults.base import FaultContext, FaultKind


class Crash(FaultKind):
    kind = "crash"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.kill(ctx.node)
