"""The states a node, a fault and a run go through, and the only transitions the engine makes between them.

Each enum's value is the string the live view shows (and that older code compared with), so a state prints and
compares as its name. ``move`` asserts the transition: one of these firing means an engine bug, which the engine
turns into an ``error`` result after tearing down like any other exception. Why a run ended is
:class:`chaos.events.EndReason` (re-exported here), since it is written to the history.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from chaos.events import EndReason

__all__ = ["FAULT_TRANSITIONS", "NODE_TRANSITIONS", "PHASE_TRANSITIONS", "EndReason", "FaultStatus", "NodeStatus",
           "Phase", "State", "move"]


class State(str, Enum):
    """A state that is also its own display string (``str(NodeStatus.RUNNING) == "running"``)."""

    def __str__(self) -> str:
        return self.value


class NodeStatus(State):
    """A training node, as the engine playing the orchestrator sees it.

    ``PENDING → RUNNING`` when started; ``RUNNING ⇄ FROZEN`` while a fault that stops the node (``stops_node``)
    is active; ``RUNNING|FROZEN → FINISHED`` on exit code 0, ``→ REPLACING`` on a failure the ``node_restart``
    policy replaces (``REPLACING → RUNNING`` after its delay), ``→ DEAD`` on a failure it does not.
    ``FINISHED`` and ``DEAD`` are final.
    """

    PENDING = "pending"
    RUNNING = "running"
    FROZEN = "frozen"
    REPLACING = "replacing"
    FINISHED = "finished"
    DEAD = "dead"


class FaultStatus(State):
    """A fault of the scenario.

    ``PENDING`` until its trigger fires, then ``SKIPPED`` (its node was not running), ``FAILED`` (inject raised:
    the fault did not happen), ``DONE`` (a one-shot fault such as a crash) or ``ACTIVE`` (it lasts: until its
    ``duration`` or, for ``lasts_until_healed`` kinds without one, until teardown). ``ACTIVE → HEALED`` once heal
    was attempted (a failed heal is recorded in the history, not retried).
    """

    PENDING = "pending"
    ACTIVE = "active"
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"
    HEALED = "healed"


class Phase(State):
    """The run as a whole: ``PREPARING → [GOLDEN →] RUNNING → FINISHED``; any phase may go straight to
    ``FINISHED`` (an error or an interrupt still ends in teardown)."""

    PREPARING = "preparing"
    GOLDEN = "golden"
    RUNNING = "running"
    FINISHED = "finished"


N, F, P = NodeStatus, FaultStatus, Phase
NODE_TRANSITIONS: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    N.PENDING: frozenset({N.RUNNING}),
    N.RUNNING: frozenset({N.FROZEN, N.FINISHED, N.REPLACING, N.DEAD}),
    N.FROZEN: frozenset({N.RUNNING, N.FINISHED, N.REPLACING, N.DEAD}),
    N.REPLACING: frozenset({N.RUNNING}),
    N.FINISHED: frozenset(),
    N.DEAD: frozenset(),
}
FAULT_TRANSITIONS: Mapping[FaultStatus, frozenset[FaultStatus]] = {
    F.PENDING: frozenset({F.SKIPPED, F.FAILED, F.DONE, F.ACTIVE}),
    F.ACTIVE: frozenset({F.HEALED}),
    F.DONE: frozenset(),
    F.SKIPPED: frozenset(),
    F.FAILED: frozenset(),
    F.HEALED: frozenset(),
}
PHASE_TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    P.PREPARING: frozenset({P.GOLDEN, P.RUNNING, P.FINISHED}),
    P.GOLDEN: frozenset({P.RUNNING, P.FINISHED}),
    P.RUNNING: frozenset({P.FINISHED}),
    P.FINISHED: frozenset(),
}
del N, F, P

S = TypeVar("S", bound=State)


def move(current: S, to: S, allowed: Mapping[S, frozenset[S]]) -> S:
    """``to``, after checking that ``current → to`` is one of the documented transitions."""
    assert to in allowed[current], f"{type(current).__name__}: {current} → {to} is not a transition the engine makes"
    return to
