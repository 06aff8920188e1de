"""Freeze: the node stops responding without dying (a GC pause, a stuck NFS read, a VM migration)."""

from __future__ import annotations

from chaos.faults.base import FaultContext, FaultKind


class Freeze(FaultKind):
    kind = "freeze"
    stops_node = True

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.freeze(ctx.node)

    def heal(self, ctx: FaultContext) -> None:
        assert ctx.node is not None
        ctx.runtime.thaw(ctx.node)
        return None
