"""The engine's own verdicts on deliberately broken jobs: hung, restart loop, deadline, failed.

Small real processes (plain Python scripts, no torch), so these run in seconds and belong to the fast tier:
each verdict is shown to fire on a job that deserves it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.engine import Engine
from chaos.loading import parse_scenario

BROKEN = Path(__file__).resolve().parent / "broken"

pytestmark = pytest.mark.usefixtures("no_leftovers")
# No report.html (html_report=False): these tests read result.json only, and drawing a report per run was
# ~0.2 CPU-s each; that every run writes one is test_report_views' (`chaos run`, and a report that fails).


def run(tmp_path: Path, script: str, extra: str = "", args: str = "", golden: bool = False) -> dict:
    text = f"""\
checks: {{golden: {str(golden).lower()}}}
name: broken
cluster:
  mode: centralized
  nodes: 1
  node_restart: {{policy: on-failure, delay_s: 0.2, max_restarts: 10}}
workload:
  command: [python, {BROKEN / script}{', ' + args if args else ''}]
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
{extra}"""
    return Engine(parse_scenario(text), out_dir=tmp_path, html_report=False).run()


def test_hang_is_detected_and_the_run_ends(tmp_path: Path) -> None:
    t0 = time.monotonic()
    result = run(tmp_path, "hang.py", "limits: {stall_timeout_s: 2, deadline_s: 60}")
    assert result["verdict"] == "hung", result["why"]
    assert "no step for 2s" in result["why"]
    assert result["steps_completed"] == 20
    assert time.monotonic() - t0 < 30


def test_restart_loop_is_detected(tmp_path: Path) -> None:
    result = run(tmp_path, "crash_loop.py", "limits: {restart_loop_restarts: 3, deadline_s: 60}")
    assert result["verdict"] == "restart_loop", result["why"]
    assert result["restarts"] >= 3


def test_deadline_stops_a_slow_job(tmp_path: Path) -> None:
    result = run(tmp_path, "print_steps.py", "limits: {deadline_s: 1.5, stall_timeout_s: 30}", args="1000")
    assert result["verdict"] == "fail" and result["end_reason"] == "deadline"
    assert 0 < result["steps_completed"] < 1000


def test_print_only_job_is_followed_by_its_output(tmp_path: Path) -> None:
    # 20 steps (the run and its golden run: ~1 s each): enough for a median step time and a bitwise comparison
    result = run(tmp_path, "print_steps.py", "expect: {completes: true}", args="20", golden=True)
    assert result["verdict"] == "pass", result["why"]
    # print_steps.py prints its loss with 4 decimals: equal there, which is not bitwise (issue 32)
    v = result["checkpoint"]["matches_golden"]
    assert v["mode"] == "equal_as_printed" and "equal at the printed precision (4 decimals)" in v["why"], v
    assert result["steps_completed"] == 20
    assert result["median_step_s"] == pytest.approx(0.05, abs=0.04)


def test_a_job_that_exits_with_an_error_fails(tmp_path: Path) -> None:
    text = f"""\
name: dies
cluster: {{mode: centralized, nodes: 1}}
workload: {{command: [python, {BROKEN / 'crash_loop.py'}], progress_regex: 'step (?P<step>\\d+)'}}
"""
    result = Engine(parse_scenario(text), out_dir=tmp_path, html_report=False).run()
    assert result["verdict"] == "fail" and result["end_reason"] == "failed"
    assert "node0=3" in result["why"]


def test_time_trigger_fires_after_the_first_step(tmp_path: Path) -> None:
    result = run(tmp_path, "print_steps.py", """\
faults:
  - {kind: crash, target: 0, at: 1s}
expect: {completes: true}""", args="40")
    [fault] = result["faults"]
    assert fault["kind"] == "crash" and fault["restarted"]
    assert result["node_replacements"] == 1
    # fired about 1 s after the first step (20 steps of 0.05 s, of 40), not at the start
    assert 10 <= fault["highest_step_before"] <= 40
    assert result["verdict"] == "pass", result["why"]


def test_random_target_is_a_function_of_the_seed() -> None:
    from chaos.engine import random_node

    picks = {seed: random_node(seed, 5) for seed in range(50)}
    assert picks == {seed: random_node(seed, 5) for seed in range(50)}
    assert set(picks.values()) == set(range(5))


def test_an_interrupted_run_is_torn_down_then_stops_its_caller(tmp_path: Path) -> None:
    """SIGTERM mid-run: the engine tears down, writes the result, then raises so pytest/explore stop too."""
    import os
    import signal
    import threading

    from chaos.engine import RunInterrupted

    timer = threading.Timer(2.0, os.kill, args=(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(RunInterrupted) as exc:
            run(tmp_path, "print_steps.py", "limits: {deadline_s: 60, stall_timeout_s: 30}", args="1000")
    finally:
        timer.cancel()
    result = exc.value.result
    assert result["end_reason"] == "interrupted" and result["verdict"] == "error"
    assert "SIGTERM" in result["why"]
    assert (result.run_dir / "result.json").exists()


def test_a_crash_after_the_job_finished_is_reported_apart_from_restarts(tmp_path: Path) -> None:
    result = run(tmp_path, "abort_at_exit.py", "expect: {restarts: {max: 0}}", args=f"{tmp_path / 'done'}, 30")
    assert result["verdict"] == "pass", result["why"]
    assert result["restarts"] == 0
    assert result["restarts_after_completion"] == 1
    assert result["steps_completed"] == 30


def test_a_planned_fault_that_never_happened_is_never_a_pass(tmp_path: Path) -> None:
    """A fault past the job's last step and a trigger a print-only script never emits: both are in result.json as
    not injected, with the reason, and the verdict is error; the same plan marked optional passes."""
    faults = """\
faults:
  - {{kind: crash, target: 0, at_step: 500{opt}}}
  - {{kind: crash, target: 0, on: {{event: checkpoint_save_started}}{opt}}}
expect: {{completes: true}}"""
    result = run(tmp_path, "print_steps.py", faults.format(opt=""), args="20")
    assert result["verdict"] == "error", result["why"]
    reached, event = result["faults"]
    assert not reached["injected"] and reached["outcome"] == "not_reached"
    assert "step 500 was never reached (the highest step completed was 20)" in reached["why_not_injected"]
    assert not event["injected"] and "a script without the probe emits no such event" in event["why_not_injected"]
    assert "planned fault(s) did not happen: #0 crash on node0" in result["why"]

    optional = run(tmp_path, "print_steps.py", faults.format(opt=", optional: true"), args="20")
    assert optional["verdict"] == "pass", optional["why"]
    assert [f["injected"] for f in optional["faults"]] == [False, False]


def test_faults_injected_expectation_counts_what_happened(tmp_path: Path) -> None:
    result = run(tmp_path, "print_steps.py", """\
faults:
  - {kind: crash, target: 0, at_step: 500, optional: true}
expect: {faults_injected: {min: 1}}""", args="20")
    assert result["verdict"] == "fail"
    [x] = [x for x in result["expectations"] if x["name"] == "faults_injected"]
    assert x["value"] == 0 and not x["ok"]


def test_a_crash_that_kills_nothing_is_not_credited(tmp_path: Path) -> None:
    """No live process to kill: the runtime says so, and the scheduler records the fault as failed, not injected."""
    from chaos.runtimes.local import LocalRuntime

    with pytest.raises(RuntimeError, match="acted on nothing"):
        LocalRuntime("20261201-000000-t-abc123", tmp_path).kill("node0")


def test_a_job_that_cannot_start_is_an_error_with_its_last_lines(tmp_path: Path) -> None:
    """Dies before any step on every start: not `hung` after the startup timeout, not a plain failure, but
    `error: the workload failed to start`, with the lines that say why."""
    t0 = time.monotonic()
    result = run(tmp_path, "fails_at_start.py", "limits: {startup_timeout_s: 120}")
    assert result["verdict"] == "error" and result["end_reason"] == "failed_to_start", result["why"]
    assert result["why"].startswith("the workload failed to start")
    assert "No such file or directory: 'data/train.csv'" in result["why"]
    assert time.monotonic() - t0 < 60  # decided from the exits, long before the startup timeout


def test_a_script_without_loss_is_told_why_it_has_no_golden_comparison(tmp_path: Path) -> None:
    text = f"""\
name: no-loss
cluster: {{mode: centralized, nodes: 1}}
workload: {{command: [python, {BROKEN / 'print_steps.py'}, '10'], progress_regex: 'step (?P<step>\\d+)'}}
"""
    result = Engine(parse_scenario(text), out_dir=tmp_path, html_report=False).run()
    verdict = result["checkpoint"]["matches_golden"]
    assert verdict["ok"] is None and "prints no loss" in verdict["why"] and "checks.golden is off" not in verdict["why"]


def test_a_pattern_that_misses_the_printed_progress_is_told_during_the_golden_run_and_stops_before_the_faulted_one(
        tmp_path: Path) -> None:
    """A wrong ``progress_regex`` costs one short wait, not two whole training runs: the golden run says so as soon
    as the job has printed 20 lines that look alike (the console shows it while the job runs), and a golden run that
    recorded no step ends the run as an error naming the pattern and the line it should match, before any fault."""
    text = f"""\
name: wrong-pattern
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {BROKEN / 'print_steps.py'}, '30']
  progress_regex: 'iteration (?P<step>\\d+) loss (?P<loss>[0-9.]+)'
faults: [{{kind: crash, target: 0, at_step: 10}}]
"""
    engine = Engine(parse_scenario(text), out_dir=tmp_path, html_report=False)
    result = engine.run()
    assert result["verdict"] == "error" and result.exit_code == 3, result["why"]
    assert "the golden run recorded no training step, so the faulted run was not started" in result["why"]
    assert "'epoch 0 | step 1 | loss 1.0000'" in result["why"] and "iteration (?P<step>" in result["why"]
    warned = [line for line in engine.log if "golden run: workload.progress_regex" in line]
    assert warned and "20 of them look alike" in warned[0], engine.log
    assert not (engine.run_dir / "logs" / "node0.log").exists()  # the faulted job never started
    [fault] = result["faults"]  # a planned fault is a promise: listed as not injected, with why
    assert not fault["injected"] and "the faulted run was never started" in fault["why_not_injected"], fault


def test_the_pattern_hint_is_only_a_hint() -> None:
    """A job may print a repeated line before its first step (a download's progress): the hint is said once and
    nothing else changes; once the pattern has matched, no hint."""
    from chaos.engine.progress import MISSED_AFTER, LogProgress

    progress = LogProgress(r"step (?P<step>\d+)", {}, history=None)  # type: ignore[arg-type]
    for i in range(MISSED_AFTER - 1):
        progress._unmatched(f"downloading shard {i}/50")
    assert progress.looks_missed() is None
    progress._unmatched("downloading shard 49/50")
    assert progress.looks_missed() == (MISSED_AFTER, "downloading shard 0/50")
    progress.matched_any = True
    assert progress.looks_missed() is None


def test_the_live_view_shows_the_golden_runs_progress_and_a_recovery_timer(tmp_path: Path) -> None:
    """While the golden run runs, the live view shows its steps (not "step 0" for its whole length); after a crash,
    until the first step after it, a timer of the seconds since."""
    from rich.console import Console

    from chaos.console import live_view
    from chaos.engine import Engine

    text = f"""\
name: live
cluster: {{mode: centralized, nodes: 1, node_restart: {{policy: on-failure, delay_s: 0.5}}}}
workload:
  command: [python, {BROKEN / 'print_steps.py'}, '30']
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
faults: [{{kind: crash, target: 0, at_step: 10}}]
"""
    seen: list = []
    engine = Engine(parse_scenario(text), out_dir=tmp_path, html_report=False, on_update=seen.append)
    assert engine.run()["verdict"] == "pass"
    golden = [s for s in seen if s.reference == "golden"]
    assert golden and max(s.step for s in golden) >= 20, [s.step for s in golden][-5:]
    waiting = [s for s in seen if s.no_step_since is not None]
    assert waiting and waiting[0].no_step_since[0] == "crash on node0", waiting[:1]
    assert all(s.no_step_since[1] >= 0 for s in waiting)  # seconds since the crash (how many: the machine's load)
    console = Console(width=200, record=True)
    console.print(live_view(waiting[-1]))
    console.print(live_view(golden[-1]))
    shown = console.export_text()
    assert "no step since the crash on node0:" in shown and "the fault-free golden run first: its progress" in shown


def test_a_trigger_the_fault_free_run_shows_cannot_fire_is_refused_before_the_faulted_run(tmp_path: Path) -> None:
    """checkpoint_write_progress fires when a save passes 1 MiB: for a job whose fault-free run saved 3 times and
    never that much, the run ends as an error before the faulted run (not after it, "not injected"), saying why and
    what to trigger on instead; an occurrence past the fault-free run's count is a warning (re-saves may reach it)."""
    text = f"""\
name: small-checkpoints
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {BROKEN / 'print_steps.py'}, '30']
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
  checkpoint_dir: ckpt
faults:
  - {{kind: crash, target: 0, on: {{event: checkpoint_write_progress}}}}
  - {{kind: crash, target: 0, on: {{event: checkpoint_save_finished, occurrence: 5}}}}
"""
    golden = {"completed": True, "trusted": True, "steps": 30, "losses": {"1": 1.0}, "run_dir": str(tmp_path),
              "trigger_counts": {"checkpoint_save_started": 3, "checkpoint_save_finished": 3}}
    engine = Engine(parse_scenario(text), out_dir=tmp_path, html_report=False, golden=lambda scenario: golden)
    result = engine.run()
    assert result["verdict"] == "error" and result.exit_code == 3, result["why"]
    assert ("faults[0].on: checkpoint_write_progress never happens for this job: its fault-free run made 3 save(s), "
            "none of which wrote 1 MiB") in result["why"]
    assert any("faults[1].on: the fault-free run emitted checkpoint_save_finished 3 time(s); #5" in line
               for line in engine.log), engine.log
    assert [f["injected"] for f in result["faults"]] == [False, False]


def test_a_write_progress_trigger_the_layer_never_watched_says_so_not_that_saves_were_small() -> None:
    """A fault-free run of 8 saves reported by the probe, no storage layer watching (storage.layer: off, or a run
    cached before a layer-only trigger mounted it): "none of which wrote 1 MiB" was false for a 2 MB backup."""
    from chaos.golden import LAYER_SAVES, trigger_counts, trigger_problems

    counts = trigger_counts([{"t": 1.0, "source": "workload", "event": "checkpoint_save_finished"}] * 8)
    assert counts[LAYER_SAVES] == 0 and counts["checkpoint_save_finished"] == 8
    scenario = parse_scenario("""\
name: t
cluster: {nodes: 2, min_nodes: 1}
workload: {name: ddp-mlp}
faults:
  - {kind: crash, target: event_node, on: {event: checkpoint_write_progress}}
""")
    [problem], _ = trigger_problems(scenario, {"trigger_counts": counts})
    assert "the storage layer saw none of them" in problem and "wrote 1 MiB" not in problem, problem
    counts[LAYER_SAVES] = 8  # the layer watched: then the saves were smaller than 1 MiB
    [problem], _ = trigger_problems(scenario, {"trigger_counts": counts})
    assert "none of which wrote 1 MiB" in problem, problem


def test_a_write_progress_trigger_that_never_fired_says_the_saves_were_smaller() -> None:
    """Without a golden run to check against, the faulted run's own counts say it: "N save(s) seen, none of which
    wrote 1 MiB", not "the storage layer saw no such operation ... saved elsewhere, or never"."""
    from chaos.engine.scheduler import FaultScheduler

    scheduler = object.__new__(FaultScheduler)  # only its counts are read for this sentence
    scheduler._trigger_counts = {"checkpoint_save_started": 15, "checkpoint_save_finished": 15}
    why = scheduler._no_event_why("checkpoint_write_progress")
    assert why.startswith("15 save(s) seen, none of which wrote 1 MiB") and "checkpoint_save_started" in why
