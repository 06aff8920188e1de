"""Node crash: the whole node disappears at once, as when a machine loses power."""

from __future__ import annotations

from typing import Any, Literal

from chaos.capabilities import KILL
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec


class CrashOptions(FaultSpec):
    kind: Literal["crash"]


class Crash(FaultKind):
    kind = "crash"
    options = CrashOptions
    summary = "the node's whole process tree is SIGKILLed (a machine losing power)"
    needs = frozenset({KILL})
    explore_default = True
    # a centralized job restarts from its checkpoint when its node is replaced (node_restart: on-failure)
    clean_resume_layouts = frozenset({"standalone", "single"})
    colour = "#d62728"
    acts_on_store = True

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        return ctx.runtime.kill(ctx.node)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        return {}
