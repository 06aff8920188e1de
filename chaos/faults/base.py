"""What every fault kind implements: ``inject`` and ``heal``, through the Runtime interface only."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from chaos.plan import Plan
from chaos.runtimes.base import Runtime
from chaos.scenario import Fault


@dataclass
class FaultContext:
    runtime: Runtime
    spec: Fault
    node: str | None  # the resolved target node (None for faults on storage)
    checkpoint_dir: Path | None
    plan: Plan | None = None
    fault_id: int = 0
    # Facts a fault wants in the history beside its mechanism (e.g. which checkpoint file it damaged).
    details: dict[str, Any] = field(default_factory=dict)
    # What a fault must keep to undo itself (rules, helper processes); never written to the history.
    handles: list[Any] = field(default_factory=list)


class FaultKind(ABC):
    kind: ClassVar[str]
    # False for faults that do not interrupt training by themselves (their effect shows at the next restart):
    # recovery metrics are not computed for them.
    disruptive: ClassVar[bool] = True
    targets_node: ClassVar[bool] = True
    # True for impairments that stay in place until healed: without a duration they last until teardown.
    lasts_until_healed: ClassVar[bool] = False
    # True when the target node stops responding while the fault is active (the engine shows it as frozen).
    stops_node: ClassVar[bool] = False

    @abstractmethod
    def inject(self, ctx: FaultContext) -> str:
        """Do the damage; return the mechanism used, as it will appear in the history and the report."""

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        """Undo the damage (at the end of ``duration`` or at teardown); a no-op for faults that cannot be undone.

        May return facts for the ``fault_healed`` event (e.g. whether the previous state came back exactly)."""
        return None
