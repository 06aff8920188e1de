"""What the network fault kinds share: one :class:`Impairment` per namespace they touch, undone on heal."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from chaos.capabilities import NODE_NETWORK
from chaos.faults.base import FaultContext, FaultKind
from chaos.machine import net_checks
from chaos.net.impair import Impairment
from chaos.spec import FaultSpec, Seconds

if TYPE_CHECKING:
    from chaos.machine import Check
    from chaos.net.impair import Impairment

# Every network fault enters namespaces and edits iptables/tc there.
BASE_CHECKS = ("root", "nsenter", "iptables", "iproute2 (ip, tc)")


class NetworkFaultSpec(FaultSpec):
    """Network impairments last ``duration``, or until the run ends when it is not given."""

    DURATION: ClassVar = "optional"
    duration: Seconds | None = Field(None, description="how long the impairment lasts (default: until the run ends)")


def impairment(ctx: FaultContext, node: str, **details: Any) -> Impairment:
    """Snapshot the node's namespace and register the impairment, so heal can undo whatever follows."""

    plan = ctx.plan
    run_id = plan.run_id if plan is not None else "run"
    imp = Impairment(ctx.runtime.net_enter(node), ctx.runtime.interface(node),
                     f"torch-chaos:{run_id}:{ctx.fault_id}")
    imp.begin()
    ctx.handles.append(imp)
    ctx.details.update(interface=imp.interface, **details)
    return imp


def mechanism_or_fail(mechanism: str | None, missing: str) -> str:
    if mechanism is None:
        raise RuntimeError(f"this kernel has {missing}; run `chaos doctor` for the fix")
    return mechanism


class NetworkFault(FaultKind):
    """Impairments change how the network behaves, not whether processes live: recovery shows as slowdown."""

    kind: ClassVar[str] = ""
    lasts_until_healed: ClassVar[bool] = True
    needs: ClassVar[frozenset[str]] = frozenset({NODE_NETWORK})
    # The machine checks beyond BASE_CHECKS this kind's mechanism needs (names from chaos.machine.net_checks).
    mechanism_checks: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def machine_checks(cls) -> list[Check]:
        return net_checks(*BASE_CHECKS, *cls.mechanism_checks)

    def inject(self, ctx: FaultContext) -> str:
        # A fault that fails halfway (one rule added, the next refused) is recorded as failed and never healed
        # by the engine: undo the part that landed here.
        try:
            return self.impair(ctx)
        except BaseException:
            self.heal(ctx)
            raise

    @abstractmethod
    def impair(self, ctx: FaultContext) -> str:
        """Apply the impairment through :func:`impairment`; return the mechanism used."""

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
