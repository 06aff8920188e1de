"""Recovery breakdown: a fault's ``recovery_s`` split into the phases the history shows."""

from __future__ import annotations

from typing import Any

from chaos.analysis.ckpt_source import checkpoint_events
from chaos.analysis.load import of_kind
from chaos.events import Ev, Source
from chaos.history import Event

_PHASE_EVENTS = (Ev.PROCESS_STARTED, Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)


def recovery_breakdowns(events: list[Event], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One breakdown per disruptive fault of ``faults`` (result.json's entries)."""
    # The job's own marks: the storage layer's checkpoint_loaded is the first read, not the end of a load.
    marks = of_kind(events, Ev.PROCESS_STARTED) + [e for e in checkpoint_events(events, *_PHASE_EVENTS[1:])
                                                   if e.get("source") != Source.STORAGE]
    return [recovery_breakdown(marks, f) for f in faults if f.get("disruptive", True) and f.get("injected", True)]


def recovery_breakdown(events: list[Event], fault: dict[str, Any]) -> dict[str, Any]:
    """Split recovery_s into: detection + rendezvous + worker start, worker init, checkpoint load, first step.

    The agent's own detection of the failure is not logged separately, so it is counted with the rendezvous.
    """
    t_f = fault["t_injected"]
    out: dict[str, Any] = {"fault": fault["id"], "kind": fault["kind"], "recovery_s": fault["recovery_s"]}
    if not fault["restarted"] or fault["recovery_s"] is None:
        out["phases"] = [("no restart: until the next step", fault["recovery_s"])]
        return out
    end = t_f + fault["recovery_s"]

    def times(name: Ev) -> list[float]:
        return [e["t"] for e in events if e.get("event") == name and t_f < e["t"] <= end]

    starts, load_started, loaded = (times(name) for name in _PHASE_EVENTS)
    phases: list[tuple[str, float | None]] = []
    t = t_f
    if starts:
        phases.append(("detection + rendezvous + worker start", min(starts) - t))
        t = min(starts)
    if load_started and min(load_started) >= t:
        phases.append(("worker init (imports, process group)", min(load_started) - t))
        t = min(load_started)
    if loaded and max(loaded) >= t:  # a print-only job's start is inferred at its first step, after its loads
        phases.append(("checkpoint load", max(loaded) - t))
        t = max(loaded)
    phases.append(("first step", end - t))
    out["phases"] = phases
    return out
