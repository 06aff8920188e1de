"""Freeze: the node stops responding without dying (a GC pause, a stuck NFS read, a VM migration)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from chaos.capabilities import FREEZE
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec


class FreezeOptions(FaultSpec):
    DURATION: ClassVar = "required"
    kind: Literal["freeze"]


class Freeze(FaultKind):
    kind = "freeze"
    options = FreezeOptions
    summary = "every process of the node is stopped for `duration`, then resumed"
    needs = frozenset({FREEZE})
    stops_node = True
    colour = "#1f77b4"
    acts_on_store = True

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.freeze(ctx.node)

    def heal(self, ctx: FaultContext) -> None:
        assert ctx.node is not None
        ctx.runtime.thaw(ctx.node)
        return None

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        low, high = bounds.durations
        return {"duration": draw(st.integers(int(low * 10), int(high * 10))) / 10}
