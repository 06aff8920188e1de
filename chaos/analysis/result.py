"""From a run directory (scenario.yaml + events.jsonl) to ``result.json``: metrics, expectations, verdict.

``result.json`` is the public contract CI users parse; ``RESULT_SCHEMA_VERSION`` changes whenever a field's
meaning does. Reads the run directory and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.analysis.checkpoints import checkpoint_verdicts
from chaos.analysis.metrics import fault_metrics, goodput, restarts_after_completion, worker_restarts
from chaos.history import Event, read_history
from chaos.loading import load_scenario
from chaos.scenario import Bound, Scenario

RESULT_SCHEMA_VERSION = 3

# How the engine's end reason maps to a verdict before expectations are looked at.
_END_VERDICTS = {"hung": "hung", "restart_loop": "restart_loop", "error": "error", "interrupted": "error"}


def _bound_ok(bound: Bound, value: float | None) -> bool:
    if value is None:
        return False
    return (bound.max is None or value <= bound.max) and (bound.min is None or value >= bound.min)


def _worst(values: list[float | None], bound: Bound) -> float | None:
    """The value that decides a per-fault bound: the largest for a max, the smallest for a min."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return max(present) if bound.max is not None else min(present)


def evaluate_expectations(scenario: Scenario, summary: dict[str, Any],
                          faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    exp = scenario.expect
    out: list[dict[str, Any]] = []
    completes = True if exp.completes is None else exp.completes
    out.append({"name": "completes", "limit": completes, "value": summary["completed"],
                "ok": summary["completed"] == completes, "implicit": exp.completes is None})
    disruptive = [f for f in faults if f["kind"] != "corrupt_checkpoint"]
    for name in ("recovery_s", "catch_up_s", "lost_steps", "slowdown"):
        bound: Bound | None = getattr(exp, name)
        if bound is not None:
            value = _worst([f[name] for f in disruptive], bound)
            out.append({"name": name, "limit": bound.model_dump(exclude_none=True), "value": value,
                        "ok": _bound_ok(bound, value),
                        **({"why": "not measured: no fault produced this figure"} if value is None else {})})
    for name in ("goodput", "restarts"):
        bound = getattr(exp, name)
        if bound is not None:
            value = summary[name]
            out.append({"name": name, "limit": bound.model_dump(exclude_none=True), "value": value,
                        "ok": _bound_ok(bound, value)})
    return out


def evaluate_checkpoint_expectations(scenario: Scenario, verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    """Expected checkpoint verdicts; a verdict that failed counts against the run even when not expected."""
    wanted = scenario.expect.checkpoint
    out = []
    for name, v in verdicts.items():
        limit = getattr(wanted, name) if wanted is not None else None
        if name == "matches_golden" and limit is not None:
            accepted = ("bitwise",) if limit == "bitwise" else ("bitwise", "within_tolerance")
            ok = v.get("mode") in accepted
            out.append({"name": f"checkpoint.{name}", "limit": limit, "value": v.get("mode"), "ok": ok})
        elif limit is not None:
            out.append({"name": f"checkpoint.{name}", "limit": limit, "value": v["ok"], "ok": v["ok"] is limit})
        elif v["ok"] is False:
            out.append({"name": f"checkpoint.{name}", "limit": True, "value": False, "ok": False, "implicit": True})
    return out


def _end(events: list[Event]) -> Event:
    ends = [e for e in events if e.get("event") == "run_ended"]
    return ends[-1] if ends else {"reason": "error", "why": "the history has no run_ended event (engine killed?)"}


def analyze(run_dir: str | Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    scenario = load_scenario(run_dir / "scenario.yaml")
    events = read_history(run_dir / "events.jsonl")
    started = next((e for e in events if e.get("event") == "run_started"), {})
    end = _end(events)
    faults = [m.to_dict() for m in fault_metrics(events)]
    gp = goodput(events)
    completed = end.get("reason") == "completed"
    summary = {
        "completed": completed,
        "goodput": gp["goodput"],
        "restarts": worker_restarts(events),
    }
    golden_path = run_dir / "golden.json"
    golden = json.loads(golden_path.read_text()) if golden_path.exists() else None
    checkpoint = checkpoint_verdicts(events, golden, scenario.checks.loss_rtol)
    expectations = evaluate_expectations(scenario, summary, faults)
    expectations += evaluate_checkpoint_expectations(scenario, checkpoint)
    reason = end.get("reason", "error")
    if reason in _END_VERDICTS:
        verdict, why = _END_VERDICTS[reason], end.get("why", reason)
    elif all(x["ok"] for x in expectations):
        verdict, why = "pass", "every expectation held"
    else:
        failed = [x["name"] for x in expectations if not x["ok"]]
        verdict, why = "fail", f"expectation(s) not met: {', '.join(failed)}"
        if reason != "completed":
            why += f" (run ended: {end.get('why', reason)})"
    t0 = started.get("t")
    for f in faults:
        f["t_injected_rel_s"] = f["t_injected"] - t0 if t0 else None
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "scenario": scenario.name,
        "run_id": started.get("run_id", run_dir.name),
        "verdict": verdict,
        "why": why,
        "end_reason": reason,
        "duration_s": (end["t"] - t0) if t0 and "t" in end else None,
        "expectations": expectations,
        "faults": faults,
        "goodput": gp["goodput"],
        "median_step_s": gp["median_step_s"],
        "median_step_basis": gp["median_basis"],
        "training_time_s": gp["training_time_s"],
        "steps_completed": gp["steps_completed"],
        "step_executions": gp["step_executions"],
        "restarts": summary["restarts"],
        "restarts_after_completion": restarts_after_completion(events),
        "node_replacements": sum(1 for e in events if e.get("event") == "node_started" and e.get("replacement")),
        "checkpoint": checkpoint,
        "golden_run": golden.get("run_dir") if golden else None,
        "environment": started.get("environment", {}),
    }


def write_result(run_dir: str | Path) -> dict[str, Any]:
    result = analyze(run_dir)
    (Path(run_dir) / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
