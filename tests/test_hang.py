"""The hang fault without a cluster: its options, the probe's order (a real process blocks and is let go), both
modes' inject/heal on a stand-in runtime with a real process, and analysis telling noticed from hung.

The real torchrun side is tests/integration/test_hang.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos.analysis.hangs import hang_outcomes, hung_cause
from chaos.analysis.result_json import build_result
from chaos.events import Ev, Source
from chaos.faults.base import FaultContext
from chaos.faults.hang import Hang, order_path, resolved_mode
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.scenario import Explore
from tests.histories import H

BASE = """
name: t
cluster: {mode: elastic, nodes: 2, procs_per_node: 2}
workload: {name: ddp-mlp, args: {steps: 100}}
faults:
  - %s
"""
COMMAND = """
name: t
cluster: {mode: elastic, nodes: 2}
workload: {command: [python, train.py], progress_regex: 'step=(?P<step>\\d+)'}
faults:
  - {kind: hang, target: 1, at_step: 5}
"""


def scenario(fault: str) -> Any:
    return parse_scenario(BASE % fault)


# ------------------------------------------------------------------------------------------ options

def test_options_defaults_and_refusals() -> None:
    f = scenario("{kind: hang, target: 1, at_step: 5}").faults[0]
    assert (f.mode, f.local_rank, f.duration) == (None, 0, None)
    f = scenario("{kind: hang, target: 1, at_step: 5, mode: process, local_rank: 1, duration: 20s}").faults[0]
    assert (f.mode, f.local_rank, f.duration) == ("process", 1, 20)
    for bad, says in (("{kind: hang, at_step: 5}", "target"),
                      ("{kind: hang, target: 1, at_step: 5, mode: gil}", "mode"),
                      ("{kind: hang, target: 1, at_step: 5, local_rank: 2}", "local_rank: 2 does not exist")):
        with pytest.raises(ScenarioInvalid) as err:
            scenario(bad)
        assert says in str(err.value), str(err.value)


def test_mode_follows_the_workload_unless_written() -> None:
    shipped = scenario("{kind: hang, target: 1, at_step: 5}")
    assert resolved_mode(shipped.faults[0], shipped) == "main_thread"
    command = parse_scenario(COMMAND)
    assert resolved_mode(command.faults[0], command) == "process"
    written = scenario("{kind: hang, target: 1, at_step: 5, mode: process}")
    assert resolved_mode(written.faults[0], written) == "process"


def test_explore_may_generate_it() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    bounds = Explore(kinds=["hang"], durations=(1.0, 3.0))
    seen: list[dict[str, Any]] = []

    @settings(max_examples=20, deadline=None, database=None)  # no 200 ms deadline on a loaded machine
    @given(st.data())
    def draw(data: Any) -> None:
        seen.append(Hang.generate(data.draw, bounds))

    draw()
    # Without explore.hang: worker 0, the workload's default mode, always a duration (until_end is opt-in).
    assert seen and all(1.0 <= o["duration"] <= 3.0 and o == {"duration": o["duration"], "local_rank": 0}
                        for o in seen)


# ------------------------------------------------------------------------------------------ the probe's order

WORKER = """
import os, sys, threading, time
sys.path.insert(0, {repo!r})
from chaos import probe
beat = threading.Event()
def background():  # the process group's watchdog stands in: it must keep running while the main thread is stuck
    while True:
        open({beats!r}, "a").write("x")
        time.sleep(0.05)
threading.Thread(target=background, daemon=True).start()
open({ready!r}, "w").close()
while not os.path.exists({go!r}):
    time.sleep(0.01)
probe.step_completed(7)
probe.step_completed(8)
"""


def _worker(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, Path]:
    repo = str(Path(__file__).resolve().parents[1])
    ready, go, beats = tmp_path / "ready", tmp_path / "go", tmp_path / "beats"
    code = WORKER.format(repo=repo, ready=str(ready), go=str(go), beats=str(beats))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **env})
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the worker did not start"
        time.sleep(0.01)
    return proc, go, beats


def _history(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def history(tmp_path: Path) -> Path:
    events = tmp_path / "events.jsonl"
    (tmp_path / "events.jsonl.acks").mkdir()
    return events


def _env(events: Path) -> dict[str, str]:
    return {"CHAOS_EVENTS": str(events), "CHAOS_NODE": "node1", "LOCAL_RANK": "0", "RANK": "1"}


def _order(events: Path, t: float, fault_id: int = 3) -> Path:
    order = order_path(events, "node1", 0)
    order.write_text(json.dumps({"fault_id": fault_id, "t": t}))
    return order


def test_the_main_thread_blocks_at_its_step_while_other_threads_run_and_goes_on_when_released(
        tmp_path: Path, history: Path) -> None:
    proc, go, beats = _worker(tmp_path, _env(history))
    try:
        order = _order(history, time.time())
        go.touch()
        _wait(lambda: any(e["event"] == Ev.HANG_STARTED for e in _history(history)))
        size = beats.stat().st_size
        time.sleep(0.5)
        assert beats.stat().st_size > size, "background threads must keep running"
        assert proc.poll() is None and [e["step"] for e in _history(history) if e["event"] == Ev.STEP_COMPLETED] == [7]
        order.unlink()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    events = _history(history)
    [started] = [e for e in events if e["event"] == Ev.HANG_STARTED]
    [released] = [e for e in events if e["event"] == Ev.HANG_RELEASED]
    assert started["source"] == Source.WORKLOAD and started["fault_id"] == 3 and started["mode"] == "main_thread"
    assert (started["node"], started["rank"], started["local_rank"], started["step"]) == ("node1", 1, 0, 7)
    assert released["why"] == "healed" and released["held_s"] >= 0.5
    assert [e["step"] for e in events if e["event"] == Ev.STEP_COMPLETED] == [7, 8]  # hung once, not again


def test_holding_the_gil_starves_the_other_python_threads_until_released(tmp_path: Path, history: Path) -> None:
    proc, go, beats = _worker(tmp_path, _env(history))
    try:
        order = order_path(history, "node1", 0)
        order.write_text(json.dumps({"fault_id": 5, "t": time.time(), "hold_gil": True}))
        go.touch()
        _wait(lambda: any(e["event"] == Ev.HANG_STARTED for e in _history(history)))
        time.sleep(0.3)
        size = beats.stat().st_size
        time.sleep(1.0)  # the worker spins (a core) all this time: 1 s shows the starvation as well as 2 s did
        starved = beats.stat().st_size - size  # a free thread beats every 50 ms: ~20 in 1 s
        order.unlink()
        released = time.monotonic()
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - released < 3.0  # it looks at its order once a second
    finally:
        proc.kill()
    assert starved <= 7, starved  # held: a beat only when the spinning thread reads its order (once a second)
    [started] = [e for e in _history(history) if e["event"] == Ev.HANG_STARTED]
    assert started["hold_gil"] is True
    with pytest.raises(ScenarioInvalid, match="hold_gil: applies to mode: main_thread only"):
        scenario("{kind: hang, target: 1, at_step: 5, mode: process, hold_gil: true}")


def test_an_order_older_than_the_process_is_not_for_it(tmp_path: Path, history: Path) -> None:
    _order(history, time.time() - 60)  # a restarted worker must not obey the order its predecessor obeyed
    proc, go, _ = _worker(tmp_path, _env(history))
    go.touch()
    assert proc.wait(timeout=20) == 0
    assert not [e for e in _history(history) if e["event"] == Ev.HANG_STARTED]


def test_a_dead_engine_never_leaves_a_rank_stuck(tmp_path: Path, history: Path) -> None:
    heartbeat = history.parent / "events.jsonl.acks" / "engine.alive"
    heartbeat.touch()
    proc, go, _ = _worker(tmp_path, _env(history))
    try:
        _order(history, time.time())
        old = time.time() - 10
        os.utime(heartbeat, (old, old))  # the engine stopped refreshing it: killed
        go.touch()
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    [released] = [e for e in _history(history) if e["event"] == Ev.HANG_RELEASED]
    assert released["why"] == "engine gone"


# ------------------------------------------------------------------------------------------ inject / heal

class StandIn:
    """A runtime with one real worker process on node1."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc
        self.signals: list[int] = []

    def kill_workers(self, name: str, sig: int = signal.SIGKILL, local_rank: int | None = None) -> str:
        self.signals.append(sig)
        os.kill(self.proc.pid, sig)
        return f"{signal.Signals(sig).name} to 1 worker process(es) (pid {self.proc.pid})"

    def node_pids(self, name: str) -> list[int]:
        return [self.proc.pid]


def _stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def test_process_mode_stops_one_worker_and_heal_continues_exactly_it(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sc = scenario("{kind: hang, target: 1, at_step: 5, mode: process}")
        runtime = StandIn(proc)
        ctx = FaultContext(runtime, sc.faults[0], "node1", None, None, fault_id=2)  # type: ignore[arg-type]
        ctx.plan = type("P", (), {"scenario": sc})()  # type: ignore[assignment]
        hang = Hang()
        mechanism = hang.inject(ctx)
        assert "SIGSTOP" in mechanism and ctx.details["pids"] == [proc.pid]
        _wait(lambda: _stopped(proc.pid))
        [event] = hang.observe(ctx)
        assert event["event"] == Ev.HANG_STARTED and event["pid"] == proc.pid and event["mode"] == "process"
        assert hang.observe(ctx) == []  # once
        healed = hang.heal(ctx)
        assert healed["restored"] is True and healed["continued"] == [proc.pid]
        assert not _stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_main_thread_mode_writes_the_order_atomically_and_heal_removes_it(tmp_path: Path) -> None:
    sc = scenario("{kind: hang, target: 1, at_step: 5}")
    (tmp_path / "events.jsonl.acks").mkdir()
    node = type("N", (), {"env": {"CHAOS_EVENTS": str(tmp_path / "events.jsonl")}})()
    plan = type("P", (), {"scenario": sc, "run_dir": tmp_path, "node": lambda self, name: node})()
    ctx = FaultContext(None, sc.faults[0], "node1", None, plan, fault_id=4)  # type: ignore[arg-type]
    mechanism = Hang().inject(ctx)
    order = tmp_path / "events.jsonl.acks" / "hang-node1-0"
    assert "main thread" in mechanism and json.loads(order.read_text())["fault_id"] == 4
    assert [p.name for p in order.parent.iterdir()] == ["hang-node1-0"]  # no temporary file left
    assert ctx.details["hang_mode"] == "main_thread" and Hang().observe(ctx) == []
    assert Hang().heal(ctx)["restored"] is True and not order.exists()


# ------------------------------------------------------------------------------------------ analysis

def _hang(h: H, fid: int = 0, mode: str = "main_thread", step: int = 20) -> H:
    h.fault(fid, kind="hang")
    h.events[-1]["details"] = {"hang_mode": mode, "local_rank": 0}
    h.events.append({"t": h.t + 0.05, "source": Source.WORKLOAD, "event": Ev.HANG_STARTED, "fault_id": fid,
                     "mode": mode, "node": "node1", "pid": h.pid + 1, "rank": 1, "local_rank": 0, "step": step})
    return h


def test_a_process_group_timeout_is_noticed_with_its_detection_time() -> None:
    h = _hang(H().start(2).steps(1, 20)).wait(10.05)
    h.events.append({"t": h.t, "source": Source.AGENT, "event": Ev.AGENT_WORKERS_FAILED, "node": "node0", "pid": 1,
                     "state": "FAILED", "attempts_left": 99, "max_restarts": 100})
    events = h.wait(3).start(2, load=20).steps(21, 40).finish(40).end()
    [(fid, o)] = hang_outcomes(events).items()
    assert fid == 0 and o["outcome"] == "noticed" and o["noticed_by"].startswith("torchrun's agent on node0")
    assert o["detection_s"] == pytest.approx(10.0, abs=0.01)
    assert o["stuck"] == {"node": "node1", "rank": 1, "local_rank": 0, "pid": 11} and o["since_step"] == 20
    assert o["held_s"] is None  # its agent stopped it: never released, so how long it was held is not recorded


def test_a_hang_nothing_notices_is_hung_and_the_why_names_the_stuck_rank() -> None:
    events = _hang(H().start(2).steps(1, 20)).wait(20).end("hung")
    events.append({"t": events[-1]["t"] + 0.1, "source": Source.ENGINE, "event": Ev.FAULT_HEALED, "fault_id": 0,
                   "kind": "hang", "at_teardown": True})
    o = hang_outcomes(events)[0]
    assert o["outcome"] == "hung" and o["detection_s"] is None
    assert "node1 rank 1 (local_rank 0, pid 11) stuck since step 20" in hung_cause({0: o})
    result = build_result(Path("r"), scenario("{kind: hang, target: 1, at_step: 20}"), events, None)
    assert result["verdict"] == "hung" and "node1 rank 1" in result["why"], result["why"]
    assert result["faults"][0]["hang"]["outcome"] == "hung"


def test_released_before_anything_noticed_and_not_checked_without_the_probe() -> None:
    h = _hang(H().start(2).steps(1, 20), mode="process").wait(5)
    h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.FAULT_HEALED, "fault_id": 0, "kind": "hang",
                     "continued": [11]})
    o = hang_outcomes(h.steps(21, 40).finish(40).end())[0]
    assert o["outcome"] == "released" and o["held_s"] == pytest.approx(4.95, abs=0.01)
    h = _hang(H().start(2).steps(1, 20)).wait(3)  # a main-thread hang with a duration: healed, then let go
    h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.FAULT_HEALED, "fault_id": 0, "kind": "hang"})
    h.events.append({"t": h.t + 0.03, "source": Source.WORKLOAD, "event": Ev.HANG_RELEASED, "fault_id": 0,
                     "mode": "main_thread", "node": "node1", "why": "healed", "held_s": 2.98})
    o = hang_outcomes(h.steps(21, 40).finish(40).end())[0]
    assert o["outcome"] == "released" and o["held_s"] == 2.98
    h = H().start(2).steps(1, 20).fault(0, kind="hang")
    h.events[-1]["details"] = {"hang_mode": "main_thread", "local_rank": 0}
    o = hang_outcomes(h.steps(21, 40).end())[0]
    assert o["outcome"] == "not_checked" and "chaos.probe.step_completed" in o["why"]


def test_other_faults_get_no_hang_entry() -> None:
    events = H().start(2).steps(1, 20).fault(0, kind="crash").steps(21, 30).end()
    assert hang_outcomes(events) == {}
    result = build_result(Path("r"), scenario("{kind: crash, target: 1, at_step: 20}"), events, None)
    assert "hang" not in result["faults"][0]


def test_the_report_names_the_outcome_once() -> None:
    from chaos.analysis.result_model import ResultModel
    from chaos.reports.text import hang_rows

    events = _hang(H().start(2).steps(1, 20)).wait(20).end("hung")
    result = build_result(Path("r"), scenario("{kind: hang, target: 1, at_step: 20}"), events, None)
    model = ResultModel.from_dict(result)
    [(label, text)] = hang_rows(type("R", (), {"result": model})())  # type: ignore[arg-type]
    assert label == "hang #0 (main_thread)" and text.startswith("hung: node1 rank 1"), text


def test_a_centralized_process_stopped_by_signal_is_not_waited_for(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A centralized node is its own worker: SIGSTOP (a hang in process mode) or any signal that leaves it
    running must not hold the engine in a 2 s wait for an exit that does not come; SIGKILL waits for the code."""
    from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark
    from chaos.runtimes.local import LocalRuntime

    runtime = LocalRuntime("hang-central", tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, TREE_VAR: runtime._tree_mark("node0"), ENGINE_VAR: engine_mark()})
    runtime._procs["node0"] = proc
    reaped: list[str] = []
    monkeypatch.setattr(runtime, "_reap", lambda name, timeout=2.0: reaped.append(name))
    try:
        assert "to the training process" in runtime.kill_workers("node0", sig=signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)  # the signal is delivered asynchronously
        assert reaped == [] and psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED
        runtime.kill_workers("node0", sig=signal.SIGCONT)
        assert reaped == [] and proc.poll() is None
        runtime.kill_workers("node0", sig=signal.SIGKILL)
        assert reaped == ["node0"] and proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_hang_after_workers_died_past_the_last_step_is_named_as_such() -> None:
    """The byo golden run seen in CI: node1's worker aborted at exit after step 300, its agent restarted it into a
    rendezvous the finished nodes never joined. Not said when the failure came before the last step (a crash
    loop) or when a fault came after it (the fault explains it)."""
    from chaos.analysis.hangs import failed_after_last_step

    def run(failed_at: float, fault_at: float | None = None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [{"t": float(s), "source": "progress", "event": "step_completed", "step": s,
                                         "node": "node0", "rank": 0, "loss": 1.0} for s in range(1, 6)]
        events.append({"t": failed_at, "source": "agent", "event": "agent_workers_failed", "node": "node1"})
        if fault_at is not None:
            events.append({"t": fault_at, "source": "engine", "event": "fault_injected", "fault_id": 0,
                           "kind": "crash", "node": "node1"})
        return sorted(events, key=lambda e: e["t"])

    why = failed_after_last_step(run(5.5))
    assert why is not None and why.startswith("after step 5, the last any worker reached, the workers of node1")
    assert failed_after_last_step(run(3.5)) is None
    assert failed_after_last_step(run(5.5, fault_at=5.2)) is None
