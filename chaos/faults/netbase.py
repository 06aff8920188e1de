"""What the network fault kinds share: one :class:`Impairment` per namespace they touch, undone on heal."""

from __future__ import annotations

from typing import Any, ClassVar

from chaos.faults.base import FaultContext, FaultKind
from chaos.net.impair import Impairment


def impairment(ctx: FaultContext, node: str) -> Impairment:
    plan = ctx.plan
    run_id = plan.run_id if plan is not None else "run"
    imp = Impairment(ctx.runtime.net_enter(node), ctx.runtime.interface(node),
                     f"torch-chaos:{run_id}:{ctx.fault_id}")
    imp.begin()
    return imp


class NetworkFault(FaultKind):
    """Impairments change how the network behaves, not whether processes live: recovery shows as slowdown."""

    kind: ClassVar[str] = ""

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        impairments: list[Impairment] = [h for h in ctx.handles if isinstance(h, Impairment)]
        ctx.handles.clear()
        results = {imp.comment + "@" + " ".join(imp.enter): imp.heal() for imp in impairments}
        restored = [r.get("restored") for r in results.values()]
        out: dict[str, Any] = {"restored": all(r is True for r in restored) if None not in restored else None}
        problems = [p for r in results.values() for p in r.get("problems", [])]  # type: ignore[union-attr]
        if problems:
            out["problems"] = problems
        delayers = [r["delayer"] for r in results.values() if "delayer" in r]
        if delayers:
            out["delayer"] = delayers[0]
        return out
