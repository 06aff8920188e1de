"""The golden cache: by content across runs and processes, computed once under a lock, never caching a golden run
that restarted; and the engine takes its golden runner from the caller.

The runner here is a stand-in that writes a small history and result.json (what a real golden run leaves in its
run directory), so the cache's own logic is exercised in milliseconds; the real golden run is exercised by
tests/test_engine_verdicts.py and the integration tier.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.golden import CACHE_ENV, GoldenCache, control_problem, default_cache_dir, golden_key
from chaos.loading import parse_scenario
from chaos.scenario import Scenario

BROKEN = Path(__file__).resolve().parent / "broken"

SCENARIO = f"""\
name: cached
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {BROKEN / 'print_steps.py'}, '5']
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
"""


def scenario() -> Scenario:
    return parse_scenario(SCENARIO)


class FakeGoldenRun:
    """Leaves what a golden run leaves (events.jsonl, result.json) and counts its calls in a file (across
    processes). ``restarts``: the restart count of each successive call (the last one repeats)."""

    def __init__(self, calls: Path, restarts: tuple[int, ...] = (0,), completed: bool = True,
                 until: Path | None = None, died_at_exit: tuple[bool, ...] = (False,)):
        self.calls, self.restarts, self.completed, self.until = calls, restarts, completed, until
        self.died_at_exit = died_at_exit  # per call (the last repeats): a worker dies after the last step, hung

    def __call__(self, scenario: Scenario, out_dir: Path) -> Path:
        n = len(self.calls.read_text().splitlines()) if self.calls.exists() else 0
        with open(self.calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + 30
        while self.until is not None and not self.until.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # a concurrent caller is to reach the lock while this golden run is in progress
        run_dir = out_dir / f"golden-{os.getpid()}-{n}"
        run_dir.mkdir(parents=True)
        events = [{"t": 1.0 + s, "source": "workload", "event": "step_completed", "step": s, "loss": 1.0 / s}
                  for s in range(1, 6)]
        died = self.died_at_exit[min(n, len(self.died_at_exit) - 1)]
        if died:  # as seen in CI: "terminate called without an active exception" at exit, the agent restarts
            events.append({"t": 6.5, "source": "agent", "event": "agent_workers_failed", "node": "node1",
                           "pid": 7, "state": "FAILED"})
        events.append({"t": 9.0, "source": "engine", "event": "run_ended",
                       "reason": "completed" if self.completed and not died else "hung"})
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        restarts = self.restarts[min(n, len(self.restarts) - 1)]
        (run_dir / "result.json").write_text(json.dumps({"restarts": 0, "restarts_after_completion": restarts}))
        return run_dir

    @property
    def count(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0


def _summary_in_process(cache_dir: str, calls: str, barrier: Any, out: Any) -> None:
    waiting = Path(calls).with_suffix(".waiting")
    runner = FakeGoldenRun(Path(calls), until=waiting)  # runs until the other process waits on the lock
    waited: list[str] = []

    def on_wait(line: str) -> None:
        waited.append(line)
        waiting.touch()

    barrier.wait()
    summary = GoldenCache(runner, Path(cache_dir), on_wait=on_wait)(scenario())
    out.put({**summary, "waited": waited})


def test_two_processes_compute_the_same_golden_run_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_summary_in_process, args=(str(tmp_path / "cache"), str(tmp_path / "calls"),
                                                           barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    summaries = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert FakeGoldenRun(tmp_path / "calls").count == 1  # the second waited on the lock, then reused
    assert sorted(s["cached"] for s in summaries) == [False, True]
    for s in summaries:  # the one that reused it is the one that waited, and it said so
        assert bool(s["waited"]) == s["cached"], s["waited"]
    first, second = summaries
    assert first["losses"] == second["losses"] and first["run_dir"] == second["run_dir"]
    assert first["key"] == golden_key(scenario())
    assert (tmp_path / "cache" / first["key"] / "golden.json").exists()


def test_the_cache_is_shared_by_content_across_output_directories(tmp_path: Path) -> None:
    runner = FakeGoldenRun(tmp_path / "calls")
    cache = tmp_path / "cache"
    first = GoldenCache(runner, cache)(scenario())
    again = GoldenCache(runner, cache)(scenario())  # e.g. the next pytest session, another --out
    assert runner.count == 1 and not first["cached"] and again["cached"]
    other = parse_scenario(SCENARIO.replace("'5'", "'6'"))  # another command: another key, another golden run
    assert not GoldenCache(runner, cache)(other)["cached"] and runner.count == 2


def test_a_golden_run_that_restarted_is_run_again_and_cached_only_when_clean(tmp_path: Path) -> None:
    runner = FakeGoldenRun(tmp_path / "calls", restarts=(1, 0))
    summary = GoldenCache(runner, tmp_path / "cache")(scenario())
    assert runner.count == 2
    assert summary["trusted"] and summary["completed"] and not summary["cached"]
    assert "restarted 1 time(s)" in summary["retried_after"][0]
    assert (tmp_path / "cache" / summary["key"] / "golden.json").exists()


def test_a_golden_run_that_keeps_restarting_is_not_trusted_nor_cached(tmp_path: Path) -> None:
    runner = FakeGoldenRun(tmp_path / "calls", restarts=(1,))
    summary = GoldenCache(runner, tmp_path / "cache")(scenario())
    assert runner.count == 2  # once more, not until it happens to be clean
    assert summary["trusted"] is False and "restarted" in summary["untrusted_why"]
    assert not (tmp_path / "cache" / summary["key"] / "golden.json").exists()
    GoldenCache(runner, tmp_path / "cache")(scenario())
    assert runner.count == 4  # nothing was cached: the next run tries again


def test_a_failed_golden_run_is_reported_not_cached_nor_repeated(tmp_path: Path) -> None:
    runner = FakeGoldenRun(tmp_path / "calls", completed=False)
    summary = GoldenCache(runner, tmp_path / "cache")(scenario())
    assert runner.count == 1 and summary["completed"] is False
    assert not (tmp_path / "cache" / summary["key"] / "golden.json").exists()


def test_a_golden_run_whose_worker_died_after_its_last_step_is_run_once_more(tmp_path: Path) -> None:
    """An exit-time crash (torchrun then hangs the job) is transient: a second run tells it from a job that never
    completes, and the first is listed with why; one that dies so every time is reported, not cached."""
    runner = FakeGoldenRun(tmp_path / "calls", died_at_exit=(True, False))
    summary = GoldenCache(runner, tmp_path / "cache")(scenario())
    assert runner.count == 2 and summary["completed"] and summary["trusted"]
    assert "ended hung: after step 5, the last any worker reached, the workers of node1 failed" in \
        summary["retried_after"][0], summary
    always = FakeGoldenRun(tmp_path / "calls2", died_at_exit=(True,))
    summary = GoldenCache(always, tmp_path / "cache2")(scenario())
    assert always.count == 2 and summary["completed"] is False and summary["trusted"] is False
    assert "2 attempt(s)" in summary["untrusted_why"]
    assert not (tmp_path / "cache2" / summary["key"] / "golden.json").exists()


def test_cache_directory_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "torch-chaos" / "golden"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "torch-chaos" / "golden"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    assert GoldenCache(FakeGoldenRun(tmp_path / "calls")).directory == tmp_path / "explicit"


def test_cli_golden_cache_option_sets_the_cache_for_the_command(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from chaos import cli
    from chaos.commands import run

    monkeypatch.delenv(CACHE_ENV, raising=False)
    seen = []
    monkeypatch.setattr(run, "main", lambda args: seen.append(str(default_cache_dir())) or 0)
    assert cli.main(["run", "quickstart", "--golden-cache", str(tmp_path / "g")]) == 0
    assert seen == [str(tmp_path / "g")]
    assert CACHE_ENV not in os.environ  # only for that command


@pytest.mark.usefixtures("no_leftovers")
def test_the_engine_runs_the_golden_runner_it_is_given(tmp_path: Path) -> None:
    from chaos.engine import Engine

    asked = []

    def golden(s: Scenario) -> dict[str, Any]:
        asked.append(s.name)
        return {"key": "fake", "run_dir": "nowhere", "cached": True, "completed": True, "losses": {"1": 1.0},
                "world_sizes": [1], "steps": 1, "state_sha256": None, "trusted": True}

    engine = Engine(scenario(), out_dir=tmp_path, html_report=False, golden=golden)
    result = engine.run()
    assert asked == ["cached"]
    assert json.loads((engine.run_dir / "golden.json").read_text())["key"] == "fake"
    started = next(json.loads(line) for line in (engine.run_dir / "events.jsonl").read_text().splitlines()
                   if '"run_started"' in line)
    assert started["golden"] == {"key": "fake", "run_dir": "nowhere", "cached": True}
    assert result["golden_run"] == "nowhere"


def test_neither_the_engine_nor_the_golden_key_imports_torch() -> None:
    code = ("import sys\n"
            "from chaos.engine import Engine\n"
            "from chaos.golden import golden_key\n"
            "from chaos.loading import parse_scenario\n"
            f"golden_key(parse_scenario({SCENARIO!r}))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class FakeControlRun:
    """Leaves what a control run leaves: steps, a planned kill, a resumed process; ``restarts`` per call."""

    def __init__(self, restarts: tuple[int, ...] = (1,), exit_codes: str = ""):
        self.restarts, self.exit_codes, self.calls = restarts, exit_codes, 0

    def __call__(self, scenario: Scenario, out_dir: Path) -> Path:
        assert [f.kind for f in scenario.faults] == ["crash"] and scenario.faults[0].at_step == 4
        assert scenario.cluster.node_restart.policy == "on-failure"  # centralized: the engine replaces the node
        run_dir = out_dir / f"control-{self.calls}"
        restarts = self.restarts[min(self.calls, len(self.restarts) - 1)]
        self.calls += 1
        (run_dir / "logs").mkdir(parents=True)
        (run_dir / "logs" / "node0.log").write_text(self.exit_codes)
        steps = [(s, "p1") for s in range(1, 5)] + [(s, "p2") for s in range(4, 6)]
        events = [{"t": 1.0 + i, "source": "progress", "event": "step_completed", "step": s, "pid": pid,
                   "node": "node0", "loss": 1.0 / s} for i, (s, pid) in enumerate(steps)]
        events.append({"t": 20.0, "source": "engine", "event": "run_ended", "reason": "completed"})
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (run_dir / "result.json").write_text(json.dumps({
            "restarts": restarts, "restarts_after_completion": 0, "faults": [{"injected": True}]}))
        return run_dir


def test_a_control_run_with_its_one_planned_restart_is_trusted_and_cached(tmp_path: Path) -> None:
    runner = FakeControlRun()
    summary = GoldenCache(runner, tmp_path / "cache").control(scenario(), 3)
    assert summary["trusted"] and summary["resume_step"] == 3 and summary["resumed_from"] == 3
    assert summary["key"] == f"{golden_key(scenario())}-control-3"
    again = GoldenCache(runner, tmp_path / "cache").control(scenario(), 3)
    assert again["cached"] and runner.calls == 1


@pytest.mark.parametrize(("restarts", "log", "why"), [
    ((2,), "", "restarted 2 time(s) during training"),
    ((1,), "failed (exitcode: -6) local_rank: 0 (pid: 7) of binary", "die unprovoked (exit codes [-6])"),
])
def test_a_control_run_restarting_unprovoked_is_run_again_then_untrusted(tmp_path: Path, restarts: tuple[int, ...],
                                                                         log: str, why: str) -> None:
    runner = FakeControlRun(restarts, log)
    summary = GoldenCache(runner, tmp_path / "cache").control(scenario(), 3)
    assert runner.calls == 2 and summary["trusted"] is False and why in summary["untrusted_why"], summary
    assert not (tmp_path / "cache" / summary["key"] / "control.json").exists()


def test_a_golden_run_whose_worker_died_unseen_is_not_trusted(tmp_path: Path) -> None:
    """A worker that aborts at exit after the last step prints nothing more: only torchrun's log shows it."""
    class DiedAtExit(FakeGoldenRun):
        def __call__(self, scenario: Scenario, out_dir: Path) -> Path:
            run_dir = super().__call__(scenario, out_dir)
            (run_dir / "logs").mkdir()
            (run_dir / "logs" / "node0.log").write_text("failed (exitcode: -6) local_rank: 0 (pid: 1) of binary\n")
            return run_dir

    summary = GoldenCache(DiedAtExit(tmp_path / "calls"), tmp_path / "cache")(scenario())
    assert summary["trusted"] is False and "exit codes [-6]" in summary["untrusted_why"]


def test_workload_env_is_part_of_the_golden_key() -> None:
    with_env = parse_scenario(SCENARIO.replace("  progress_regex", "  env: {SEED: '1'}\n  progress_regex"))
    assert golden_key(with_env) != golden_key(scenario())
    other = parse_scenario(SCENARIO.replace("  progress_regex", "  env: {SEED: '2'}\n  progress_regex"))
    assert golden_key(other) != golden_key(with_env)


def _elastic_control(tmp_path: Path, failed_at: float) -> tuple[Path, list[dict]]:
    """A control history with torchrun's agent events: node0's worker killed at t=10, node1's agent finding its
    worker group failed at ``failed_at``; node1's log shows the worker's gloo exit (code 1)."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node1.log").write_text("failed (exitcode: 1) local_rank: 0 (pid: 9) of binary\n")
    events = [
        {"t": 5.0, "source": "progress", "event": "step_completed", "step": 4, "pid": 1, "node": "node0"},
        {"t": 10.0, "source": "engine", "event": "fault_injected", "kind": "kill_worker", "node": "node0"},
        {"t": failed_at, "source": "agent", "event": "agent_workers_failed", "node": "node1", "state": "FAILED",
         "attempts_left": 1, "max_restarts": 1},
        {"t": 10.2, "source": "agent", "event": "agent_workers_failed", "node": "node0", "state": "FAILED",
         "attempts_left": 1, "max_restarts": 1},
        {"t": 20.0, "source": "progress", "event": "step_completed", "step": 4, "pid": 2, "node": "node0"},
    ]
    return tmp_path, events


def test_a_peer_dying_of_the_planned_kill_does_not_make_the_control_run_untrusted(tmp_path: Path) -> None:
    """After the kill, the other nodes' workers may die of gloo's lost connection (exit 1) before their agents
    restart them: a race the machine's load decides, and the kill's doing."""
    run_dir, events = _elastic_control(tmp_path, failed_at=10.4)
    result = {"restarts": 1, "restarts_after_completion": 0, "faults": [{"injected": True}]}
    assert control_problem(run_dir, result, events) is None


def test_a_worker_group_failing_before_the_planned_kill_is_unprovoked(tmp_path: Path) -> None:
    run_dir, events = _elastic_control(tmp_path, failed_at=8.0)
    result = {"restarts": 1, "restarts_after_completion": 0, "faults": [{"injected": True}]}
    problem = control_problem(run_dir, result, sorted(events, key=lambda e: e["t"]))
    assert problem is not None and "before the planned kill (node1, 2.0 s before it)" in problem, problem


def test_the_golden_run_leaves_out_pacing_and_shares_the_unpaced_key() -> None:
    """A scenario paced so that its fault lands in time (elastic-freeze: 25 ms a step) gets the same reference
    numbers unpaced: its golden run is the unpaced job, under the same key as the unpaced scenario's."""
    from chaos.golden import control_scenario, golden_scenario

    text = "name: paced\ncluster: {{mode: elastic, nodes: 2}}\nworkload:\n  name: ddp-mlp\n  args: {{{args}}}\n"
    paced = parse_scenario(text.format(args="steps: 40, checkpoint_every: 10, step_time_ms: 25"))
    unpaced = parse_scenario(text.format(args="steps: 40, checkpoint_every: 10"))
    assert golden_key(paced) == golden_key(unpaced)
    assert golden_scenario(paced).workload.args == {"steps": 40, "checkpoint_every": 10}  # type: ignore[union-attr]
    assert control_scenario(paced, 10).workload.args == {"steps": 40, "checkpoint_every": 10}  # type: ignore[union-attr]
    assert paced.workload.args["step_time_ms"] == 25  # type: ignore[union-attr]  # the scenario itself keeps it
    other = parse_scenario(text.format(args="steps: 41, checkpoint_every: 10, step_time_ms: 25"))
    assert golden_key(other) != golden_key(paced)
