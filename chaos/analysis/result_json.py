"""``result.json``: a run's metrics, expectations and verdict, built from its analysed history and written.

``result.json`` is the public contract CI users parse; this module is its one serializer, and
``chaos.analysis.result_model`` its one loader (with ``RESULT_SCHEMA_VERSION`` and what each version changed).
Reads the run directory and nothing else. (Not to be confused with the ``Result`` handle ``chaos.run()``
returns.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.analysis.breakdown import breakdown_for_result, recovery_breakdowns
from chaos.analysis.channel import channel_summary
from chaos.analysis.checkpoints import checkpoint_checkers, restart_loop_cause
from chaos.analysis.federated import expectation_values, federated_metrics, server_ended_training
from chaos.analysis.hangs import (
    add_hangs,
    done_but_not_exited,
    failed_after_last_step,
    hung_cause,
    single_point_lost,
)
from chaos.analysis.load import of_kind
from chaos.analysis.metrics import fault_metrics, goodput, restarts_after_completion, worker_restarts
from chaos.analysis.planned import missing_promises, never_acted, not_injected
from chaos.analysis.progress_lines import unmatched_progress
from chaos.analysis.result_model import RESULT_SCHEMA_VERSION
from chaos.analysis.step_timing import step_timings
from chaos.analysis.throughput import training_setup
from chaos.analysis.verdict import Compose, RequiresFaultsFired, Verdict
from chaos.events import EndReason, Ev
from chaos.golden import no_golden_why
from chaos.history import Event
from chaos.scenario import Bound, CommandWorkload, Scenario
from chaos.workload_args import FLOWER_MLP

# How the engine's end reason maps to a verdict before expectations are looked at.
_END_VERDICTS = {EndReason.HUNG: "hung", EndReason.RESTART_LOOP: "restart_loop", EndReason.ERROR: "error",
                 EndReason.INTERRUPTED: "error", EndReason.FAILED_TO_START: "error"}


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
    # Only faults that happened and interrupt training have recovery figures.
    disruptive = [f for f in faults if f["disruptive"] and f.get("injected", True)]
    for name in ("recovery_s", "catch_up_s", "lost_steps", "slowdown"):
        bound: Bound | None = getattr(exp, name)
        if bound is not None:
            value = _worst([f[name] for f in disruptive], bound)
            out.append({"name": name, "limit": bound.model_dump(exclude_none=True), "value": value,
                        "ok": _bound_ok(bound, value),
                        **({"why": "not measured: no fault produced this figure"} if value is None else {})})
    for name in ("goodput", "restarts", "faults_injected"):
        bound = getattr(exp, name)
        if bound is not None:
            value = summary[name]
            out.append({"name": name, "limit": bound.model_dump(exclude_none=True), "value": value,
                        "ok": _bound_ok(bound, value)})
    return out


def evaluate_federated_expectations(scenario: Scenario, fed: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``expect.federated``'s bounds against the run's federated figures (a bound on a run with none fails, with
    why)."""
    wanted = scenario.expect.federated
    if wanted is None:
        return []
    values = expectation_values(fed)
    out = []
    for name in type(wanted).model_fields:
        bound: Bound | None = getattr(wanted, name)
        if bound is None:
            continue
        value = values.get(name)
        out.append({"name": f"federated.{name}", "limit": bound.model_dump(exclude_none=True), "value": value,
                    "ok": _bound_ok(bound, value),
                    **({"why": "not measured: " + ("the run recorded no federated round" if fed is None else
                                                   "no fault or no golden run produced this figure")}
                       if value is None else {})})
    return out


def evaluate_checkpoint_expectations(scenario: Scenario, verdicts: dict[str, Verdict]) -> list[dict[str, Any]]:
    """Expected checkpoint verdicts; a verdict that failed counts against the run even when not expected."""
    wanted = scenario.expect.checkpoint
    out = []
    for name, v in verdicts.items():
        limit = getattr(wanted, name, None) if wanted is not None else None  # a verdict no scenario can require yet
        if name == "matches_golden" and limit is not None:
            # equal as printed proves no bitwise equality (the digits not printed may differ), only closeness
            accepted = {"bitwise": ("bitwise",), "within_noise": ("bitwise", "within_noise", "equal_as_printed")}.get(
                limit, ("bitwise", "within_noise", "within_tolerance", "equal_as_printed"))
            ok = v.get("mode") in accepted
            out.append({"name": f"checkpoint.{name}", "limit": limit, "value": v.get("mode"), "ok": ok})
        elif limit is not None:
            out.append({"name": f"checkpoint.{name}", "limit": limit, "value": v.ok, "ok": v.ok is limit})
        elif v.ok is False:
            out.append({"name": f"checkpoint.{name}", "limit": True, "value": False, "ok": False, "implicit": True})
    return out


def _end(events: list[Event]) -> Event:
    ends = of_kind(events, Ev.RUN_ENDED)
    if ends:
        return ends[-1]
    return {"reason": EndReason.ERROR, "why": "incomplete history: no run_ended event (the engine was killed?)"}


def add_oom_kills(faults: list[dict[str, Any]], events: list[Event]) -> None:
    """Each fault under which the kernel's OOM killer acted gets ``oom_kills``: whom it killed, from the kernel's own
    record (``oom_killed`` events). A SIGKILL crash has none: both say exit -9, only this tells them apart. The key
    is absent for faults without such events (results of other faults keep their exact content)."""
    kills = of_kind(events, Ev.OOM_KILLED)
    for f in faults:
        mine = [e for e in kills if e.get("fault_id") == f["id"]]
        if mine:
            f["oom_kills"] = [{k: e.get(k) for k in ("node", "pid", "role", "rank", "local_rank", "killed_at",
                                                    "limit_bytes") if e.get(k) is not None}
                              | _after_injection(e.get("killed_at"), f.get("t_injected")) for e in mine]


def _after_injection(killed_at: float | None, t_injected: float | None) -> dict[str, Any]:
    """``after_injection_s`` of an OOM kill, never negative. ``t_injected`` is when the runtime's call returned,
    after the memory limit took effect, and ``killed_at`` is the kernel's record of the kill converted to the wall
    clock (on another host under Slurm, that host's clock): a kill during the injection, or a few ms of clock
    difference, puts the record before the injection. The fault caused the kill, so it did not come first: said as
    0 with the measured difference in ``after_injection_note``."""
    if killed_at is None or t_injected is None:
        return {"after_injection_s": None}
    after = killed_at - t_injected
    if after >= 0:
        return {"after_injection_s": after}
    return {"after_injection_s": 0.0,
            "after_injection_note": f"the kernel's record of the kill is {-after:.3f} s before the injection was "
                                    "recorded (the limit acts before the runtime's call returns, and the kernel's "
                                    "clock is not the engine's): reported as 0, the kill came from the fault"}


def add_node_replacements(faults: list[dict[str, Any]], events: list[Event]) -> None:
    """Each fault whose node was replaced while it lasted gets ``node_replaced``: whether the fault was put on the
    replacement (``reapplied``, with the uncapped time ``after_s``) or ended early for it (``why``). Absent when
    no ``fault_node_replaced`` event names the fault."""
    seen = of_kind(events, Ev.FAULT_NODE_REPLACED)
    for f in faults:
        mine = [e for e in seen if e.get("fault_id") == f["id"]]
        if mine:
            f["node_replaced"] = [{k: e[k] for k in ("node", "reapplied", "after_s", "mechanism", "why", "pids")
                                   if e.get(k) is not None}
                                  | {"after_injection_s": round(e["t"] - f["t_injected"], 3)
                                     if f.get("t_injected") is not None else None} for e in mine]


def build_result(run_dir: Path, scenario: Scenario, events: list[Event], golden: dict[str, Any] | None,
                 control: dict[str, Any] | None = None) -> dict[str, Any]:
    """result.json's content for a run, from its (sorted) history, its golden run's summary and, when one was
    needed, its control run's (chaos.analysis.noise)."""
    started = next(iter(of_kind(events, Ev.RUN_STARTED)), {})
    end = _end(events)
    injected = [{**m.to_dict(), "injected": True} for m in fault_metrics(events)]
    faults = sorted(injected + not_injected(events, {f["id"] for f in injected}), key=lambda f: f["id"])
    never_acted(faults, events)
    add_oom_kills(faults, events)
    add_node_replacements(faults, events)
    hangs = add_hangs(faults, events)
    timings = step_timings(events, faults)
    for f in faults:
        if f["id"] in timings:  # a fault with an end and steps inside it: how each rank spent its steps
            f["step_timing"] = timings[f["id"]]
    missing = missing_promises(faults)
    gp = goodput(events)
    completed = end.get("reason") == EndReason.COMPLETED
    # a run whose planned faults did not all fire is not the run the scenario describes: its whole-run figures
    # would read as that run's (a goodput of 0.98 "under" a crash that never happened)
    not_fired = _not_fired_why(missing) if missing else None
    summary = {
        "completed": completed,
        "goodput": None if not_fired else gp["goodput"],
        "restarts": worker_restarts(events),
        "faults_injected": sum(1 for f in faults if f.get("injected")),
    }
    reason = end.get("reason", EndReason.ERROR)
    # a print-only job whose progress_regex matched nothing it printed: said as such, whatever else happened
    # (not a job that never started: its failure is the finding)
    unmatched = unmatched_progress(run_dir, scenario.workload.progress_regex, events) if isinstance(
        scenario.workload, CommandWorkload) and reason != EndReason.FAILED_TO_START else None
    checkers = checkpoint_checkers(
        golden, scenario.checks.loss_rtol, control, no_golden_why=_no_golden_why(run_dir, scenario, golden),
        no_steps_why="the run recorded no step to compare (see why)" if unmatched and completed else None)
    checkpoint = Compose({name: RequiresFaultsFired(checker, not_fired)
                          for name, checker in checkers.checkers.items()}).check_each(events)
    expectations = evaluate_expectations(scenario, summary, faults)
    expectations += evaluate_checkpoint_expectations(scenario, checkpoint)
    fed = federated_metrics(events, golden, _planned_rounds(scenario))
    expectations += evaluate_federated_expectations(scenario, fed)
    if reason in _END_VERDICTS:
        verdict, why = _END_VERDICTS[reason], end.get("why", reason)
        cause = restart_loop_cause(events) if reason in (EndReason.RESTART_LOOP, EndReason.HUNG) else None
        if cause:  # the file a crash loop kept dying on (the error the workers printed is in the engine's why)
            why += f"; {cause}"
        stuck = hung_cause(hangs) if reason == EndReason.HUNG else None
        if stuck:  # the rank a hang fault left stuck, named
            why += f"; {stuck}"
        done = done_but_not_exited(events, planned_steps(scenario, golden)) if reason in (
            EndReason.HUNG, EndReason.RESTART_LOOP) else None
        late = failed_after_last_step(events) if reason == EndReason.HUNG and not cause else None
        if done:  # training ended; the job did not exit: said first, the engine's stop after it
            why = f"{done}; stopped: {why}"
        if late:  # workers that died after the last step, restarted into a round nobody joins
            why += f"; {late}"
        lost = single_point_lost(events) if not done else None
        if lost:  # the node the launcher cannot do without was hit: said, so the stop reads as the end it was
            why += f"; {lost}"
        if unmatched:
            why += f"; no training step was recorded: {unmatched}"
    elif missing and not unmatched:  # a run whose planned fault did not happen proves nothing about that fault
        verdict = "error"
        why = _plain_why(missing) + " (mark a fault optional: true when it may legitimately not happen)"
    elif unmatched:  # nothing was measured: no expectation, pass or fail, means anything
        verdict, why = "error", f"no training step was recorded: {unmatched}" + (
            f" (and so: {_plain_why(missing)})" if missing else "")
    elif all(x["ok"] for x in expectations):
        verdict, why = "pass", "every expectation held"
    else:
        failed = [x["name"] for x in expectations if not x["ok"]]
        verdict, why = "fail", f"expectation(s) not met: {', '.join(failed)}"
        if reason != EndReason.COMPLETED:
            why += f" (run ended: {end.get('why', reason)})"
        if server_why := server_ended_training(fed, completed):  # the federated job's coordinator was lost
            why += f"; {server_why}"
    t0 = started.get("t")
    for f in faults:
        f["t_injected_rel_s"] = f["t_injected"] - t0 if t0 and f["t_injected"] is not None else None
    breakdowns = {b.fault: b for b in recovery_breakdowns(events, faults)}
    for f in faults:
        if f["id"] in breakdowns:  # injected and disruptive: its recovery split into phases
            f["recovery_breakdown"] = breakdown_for_result(breakdowns[f["id"]])
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "scenario": scenario.name,
        "run_id": started.get("run_id", run_dir.name),
        "verdict": verdict,
        "why": why,
        "end_reason": str(reason),
        "duration_s": (end["t"] - t0) if t0 and "t" in end else None,
        "expectations": expectations,
        "faults": faults,
        "goodput": summary["goodput"],
        # why goodput is null although steps were measured (absent when it is reported, or null for want of steps)
        **({"goodput_why": f"not reported: {not_fired}"} if not_fired and gp["goodput"] is not None else {}),
        "median_step_s": gp["median_step_s"],
        "median_step_basis": gp["median_basis"],
        "training_time_s": gp["training_time_s"],
        "steps_completed": gp["steps_completed"],
        "step_executions": gp["step_executions"],
        "restarts": summary["restarts"],
        "restarts_after_completion": restarts_after_completion(events),
        "node_replacements": sum(1 for e in of_kind(events, Ev.NODE_STARTED) if e.get("replacement")),
        "checkpoint": {name: v.to_dict() for name, v in checkpoint.items()},
        "golden_run": golden.get("run_dir") if golden else None,
        "control_run": control.get("run_dir") if control else None,
        "environment": started.get("environment", {}),
        # what each node got; absent for a history from before schema 8, whose plan did not say
        **({"resources": r} if (r := resources_of(started)) is not None else {}),
        # a federated run's rounds (launcher: flower; chaos.analysis.federated); absent for every other job
        **({"federated": fed} if fed is not None else {}),
        # what the history channel measured (clock skew) and carried; absent for a history written without it
        **({"channel": ch} if (ch := channel_summary(events)) is not None else {}),
    }


def _no_golden_why(run_dir: Path, scenario: Scenario, golden: dict[str, Any] | None) -> str | None:
    """Why there is no golden summary to compare with although the scenario asked for one (None when there is one,
    or none was asked for: the checker then says checks.golden is off)."""
    if golden is not None or not scenario.checks.golden:
        return None

    why = no_golden_why(scenario)
    if not why and (run_dir / "golden.json").exists():  # there, but not a readable summary (a damaged copy)
        why = ("golden.json in the run directory is damaged (not the summary of a fault-free run), so there is "
               "nothing to compare with")
    return why or "the golden run did not finish (interrupted or failed before its summary was written)"


def planned_steps(scenario: Scenario, golden: dict[str, Any] | None) -> int | None:
    """The steps the job trains when nothing goes wrong: a shipped workload's ``steps``, else the completed golden
    run's (a command workload's count is only known by running it); None when neither says."""

    setup = training_setup(scenario.workload)
    if setup is not None and isinstance(setup.get("steps"), int):
        return int(setup["steps"])
    if golden and golden.get("completed") and golden.get("trusted", True) and golden.get("steps"):
        return int(golden["steps"])
    return None


def _planned_rounds(scenario: Scenario) -> int | None:
    """A shipped federated workload's ``rounds`` (its default when not given); None for any other workload."""
    w = scenario.workload
    if getattr(w, "name", None) != "flower-mlp":
        return None
    value = w.args.get("rounds", FLOWER_MLP["rounds"].default)  # type: ignore[union-attr]
    return int(value) if isinstance(value, (int, float, str)) and str(value).isdigit() else None


def _not_fired_why(missing: list[dict[str, Any]]) -> str:
    """``the planned fault never fired (#1 crash on node1: not_reached)``: what a figure or verdict that the fault
    was meant to test did not see."""
    said = ", ".join(f"#{f['id']} {f['kind']}" + (f" on {f['target']}" if f.get("target") not in (None, "None")
                                                   else "") + f": {f['outcome']}" for f in missing)
    return f"the planned fault{'s' if len(missing) > 1 else ''} never fired ({said})"


def _plain_why(missing: list[dict[str, Any]]) -> str:
    """The planned faults that did not happen, each with why."""
    return "planned fault(s) did not happen: " + "; ".join(
        f"#{f['id']} {f['kind']}" + (f" on {f['target']}" if f.get("target") not in (None, "None") else "")
        + f" ({f['outcome']}: {f['why_not_injected']})" for f in missing)


def resources_of(started: dict[str, Any]) -> dict[str, Any] | None:
    """What each node got (``cluster.resources``, as the plan pinned it); None for a history that predates it."""
    plan = started.get("plan")
    resources = plan.get("resources") if isinstance(plan, dict) else None
    return resources if isinstance(resources, dict) and resources else None

