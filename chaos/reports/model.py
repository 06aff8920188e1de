"""The content of every report, computed once from a run directory: result, timelines, breakdowns, advice."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.analysis.result import analyze
from chaos.history import Event, read_history
from chaos.loading import load_scenario
from chaos.reports.advice import interval_advice
from chaos.scenario import Scenario, ShippedWorkload


@dataclass
class Report:
    run_dir: Path
    scenario: Scenario
    result: dict[str, Any]
    events: list[Event]
    t0: float
    golden: dict[str, Any] | None
    breakdowns: list[dict[str, Any]] = field(default_factory=list)
    advice: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result, "recovery_breakdown": self.breakdowns, "checkpoint_interval": self.advice,
                "scenario": self.scenario.model_dump(mode="json", exclude_none=True)}


def recovery_breakdown(events: list[Event], fault: dict[str, Any]) -> dict[str, Any]:
    """Split recovery_s into the phases the history shows: workers back, checkpoint loaded, first step."""
    t_f = fault["t_injected"]
    out: dict[str, Any] = {"fault": fault["id"], "kind": fault["kind"], "recovery_s": fault["recovery_s"]}
    if not fault["restarted"] or fault["recovery_s"] is None:
        out["phases"] = [("no restart: until the next step", fault["recovery_s"])]
        return out
    end = t_f + fault["recovery_s"]
    starts = [e["t"] for e in events if e.get("event") == "process_started" and t_f < e["t"] <= end]
    load_started = [e["t"] for e in events if e.get("event") == "checkpoint_load_started" and t_f < e["t"] <= end]
    loaded = [e["t"] for e in events if e.get("event") == "checkpoint_loaded" and t_f < e["t"] <= end]
    phases: list[tuple[str, float | None]] = []
    t = t_f
    if starts:
        phases.append(("detection + rendezvous + worker start", min(starts) - t))
        t = min(starts)
    if load_started:
        phases.append(("worker init (imports, process group)", min(load_started) - t))
        t = min(load_started)
    if loaded:
        phases.append(("checkpoint load", max(loaded) - t))
        t = max(loaded)
    phases.append(("first step", end - t))
    out["phases"] = phases
    return out


def build_report(run_dir: Path, mtbf_s: float | None = None) -> Report:
    scenario = load_scenario(run_dir / "scenario.yaml")
    result = analyze(run_dir)
    events = read_history(run_dir / "events.jsonl")
    golden_path = run_dir / "golden.json"
    golden = json.loads(golden_path.read_text()) if golden_path.exists() else None
    t0 = events[0]["t"] if events else 0.0
    report = Report(run_dir, scenario, result, events, t0, golden)
    report.breakdowns = [recovery_breakdown(events, f) for f in result["faults"]
                         if f["kind"] != "corrupt_checkpoint"]
    every = None
    if isinstance(scenario.workload, ShippedWorkload):
        every = int(scenario.workload.args.get("checkpoint_every", 25))
    recoveries = [f["recovery_s"] for f in result["faults"] if f.get("recovery_s") is not None]
    report.advice = interval_advice(events, mtbf_s or scenario.checks.mtbf_s, every, result["median_step_s"],
                                    max(recoveries) if recoveries else None)
    return report
