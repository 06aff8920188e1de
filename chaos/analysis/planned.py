"""A planned fault is a promise: every fault of the plan appears in result.json, injected or not, with the reason.

The plan (``run_started.plan.faults``) lists what the scenario asked for; the engine records each fault that
did not happen (``fault_skipped``: its node was not running; ``fault_failed``: the mechanism raised or acted on
nothing; ``fault_not_reached``: its trigger was never met). A storage fault whose rule matched no operation while it
lasted (its ``fault_healed`` says ``matched: 0``) was installed but never acted: it did not happen either
(outcome ``no_effect``). A non-optional fault that did not happen makes the
verdict ``error``: a run must never pass because its fault silently never fired. See docs/design.md,
"Verdicts".
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from chaos.analysis.load import of_kind
from chaos.analysis.metrics import FaultMetrics
from chaos.events import Ev
from chaos.history import Event

# An injected fault's keys (chaos.analysis.metrics.FaultMetrics), every figure null: the fault never happened.
_NO_FIGURES: dict[str, Any] = {**{f.name: None for f in fields(FaultMetrics)}, "restarted": False}
_OUTCOMES = {Ev.FAULT_SKIPPED: "skipped", Ev.FAULT_FAILED: "failed", Ev.FAULT_NOT_REACHED: "not_reached"}


def planned_faults(events: list[Event]) -> list[dict[str, Any]]:
    """The plan's faults (id, kind, target, trigger, optional ...); empty for a history without a plan."""
    started = next(iter(of_kind(events, Ev.RUN_STARTED)), {})
    plan = started.get("plan") if isinstance(started.get("plan"), dict) else {}
    faults = plan.get("faults") if isinstance(plan.get("faults"), list) else []
    return [f for f in faults if isinstance(f, dict) and isinstance(f.get("id"), int)]


def not_injected(events: list[Event], injected_ids: set[int]) -> list[dict[str, Any]]:
    """One entry per planned fault that did not happen, in result.json's fault shape (metrics left null)."""
    why: dict[int, tuple[str, str, Event]] = {}
    for kind, outcome in _OUTCOMES.items():
        for e in of_kind(events, kind):
            if isinstance(e.get("fault_id"), int):
                why.setdefault(e["fault_id"], (outcome, str(e.get("why", "")), e))
    out = []
    ended = bool(of_kind(events, Ev.RUN_ENDED))
    for f in planned_faults(events):
        if f["id"] in injected_ids:
            continue
        outcome, reason, e = why.get(f["id"], ("unknown", "the history does not say what became of it" + (
            "" if ended else " (it ends before the run did: engine killed?)"), {}))
        out.append({
            **_NO_FIGURES, "id": f["id"], "kind": f.get("kind"), "target": e.get("target", f.get("target")),
            "disruptive": e.get("disruptive", True), "injected": False, "outcome": outcome,
            "why_not_injected": reason, "optional": bool(f.get("optional")), "trigger": f.get("trigger"),
        })
    return out


def never_acted(faults: list[dict[str, Any]], events: list[Event]) -> None:
    """Mark the injected faults whose storage rule matched no operation while it lasted as not injected, with why
    (a ``disk_full`` on paths the job never writes would otherwise pass as survived)."""
    idle = {e["fault_id"] for e in of_kind(events, Ev.FAULT_HEALED)
            if isinstance(e.get("fault_id"), int) and e.get("matched") == 0}
    plan = {f["id"]: f for f in planned_faults(events)}
    details = {e.get("fault_id"): e.get("details") or {} for e in of_kind(events, Ev.FAULT_INJECTED)}
    for f in faults:
        if f.get("injected") and f["id"] in idle:
            paths = details.get(f["id"], {}).get("paths", "*")
            f.update(injected=False, outcome="no_effect", optional=bool(plan.get(f["id"], {}).get("optional")),
                     why_not_injected=f"its storage rule (paths: {paths}) matched no operation of the job on the "
                     "checkpoint storage while it lasted: the fault never acted")


def missing_promises(faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The planned, non-optional faults that did not happen."""
    return [f for f in faults if f.get("injected") is False and not f.get("optional")]
