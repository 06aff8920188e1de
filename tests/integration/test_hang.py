"""The hang fault for real (local runtime, 2 nodes, torchrun): a rank stuck with its process alive is noticed when
the process-group timeout is short (main_thread mode) and hangs the job when it is not (process mode, the worker
SIGSTOPped), each with its documented verdict, the stuck rank named and the fault healed exactly; and an engine
SIGKILLed with a worker stopped leaves nothing `chaos cleanup` cannot remove.

Three real runs, ~90 s on 2 cores: the two shipped scenarios without their golden run (what the hang tests is
noticing and naming; the noticed run's resume was bitwise against the golden run when measured, see the
scenario's comment) and a short one killed mid-fault.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos.history import read_history
from chaos.marks import marked_processes
from tests.runs import run_scenario, shipped, wait_for
from tests.tiers import FULL

# The gate's hang: the main thread stuck, noticed by the process-group timeout (~20 s); the rest waits for --full.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

EXPECTED_VERDICT = {
    "process/hang-noticed": "pass",
    "process/hang-unnoticed": "hung",
}


def run(name: str) -> tuple[dict[str, Any], Path]:
    scenario = shipped(name)
    scenario.checks.golden = False  # ~30 s saved per run; the golden comparison is not what a hang tests
    if name == "process/hang-unnoticed":
        # what is tested is that nothing in the job notices and the verdict names the rank; 10 s without a step
        # (~600 steps' time here) says hung as surely as the shipped 20 s, and 10 s sooner
        scenario.limits.stall_timeout_s = 10
    return run_scenario(scenario)


def events(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == name]


def test_a_short_process_group_timeout_notices_the_stuck_rank() -> None:
    result, run_dir = run("process/hang-noticed")
    assert result["verdict"] == EXPECTED_VERDICT["process/hang-noticed"], (result["why"], run_dir)
    fault = result["faults"][0]
    hang = fault["hang"]
    assert hang["mode"] == "main_thread" and hang["outcome"] == "noticed", hang
    assert hang["stuck"]["node"] == "node1" and hang["stuck"]["rank"] == 1 and hang["since_step"] == 100, hang
    # the process-group timeout is 10 s (tuned preset): nothing can notice sooner, and the agent reacts within ~2 s
    assert 9.5 <= hang["detection_s"] <= 20, hang
    assert "found its workers failed" in hang["noticed_by"], hang
    [started] = events(run_dir, "hang_started")
    assert started["source"] == "workload" and started["pid"] == hang["stuck"]["pid"]
    assert fault["restarted"] and fault["lost_steps"] == 0, fault
    [healed] = events(run_dir, "fault_healed")
    assert healed["restored"] is True and not list((run_dir / "events.jsonl.acks").glob("hang-*"))


@FULL
def test_without_a_timeout_the_job_hangs_and_the_verdict_names_the_stopped_worker() -> None:
    result, run_dir = run("process/hang-unnoticed")
    assert result["verdict"] == EXPECTED_VERDICT["process/hang-unnoticed"], (result["why"], run_dir)
    hang = result["faults"][0]["hang"]
    assert hang["mode"] == "process" and hang["outcome"] == "hung" and hang["detection_s"] is None, hang
    assert "node1 rank 1" in result["why"] and "stuck since step 100" in result["why"], result["why"]
    [started] = events(run_dir, "hang_started")
    assert started["source"] == "engine" and started["pid"] == hang["stuck"]["pid"]
    assert "SIGSTOP to 1 worker" in result["faults"][0]["mechanism"]
    [healed] = events(run_dir, "fault_healed")  # SIGCONT to exactly the stopped worker, before teardown
    assert healed["restored"] is True and healed["continued"] == [started["pid"]], healed
    assert not events(run_dir, "agent_workers_failed")  # nothing in the job noticed


SIGKILL_ME = """\
name: sigkill-me-hang
cluster: {mode: elastic, nodes: 2, min_nodes: 2, process_group_timeout_s: 600}
workload: {name: ddp-mlp, args: {steps: 2000, checkpoint_every: 50}}
faults:
  - {kind: hang, target: 1, at_step: 20, mode: process}
checks: {golden: false}
limits: {deadline_s: 200, stall_timeout_s: 150}
"""


@FULL
def test_cleanup_finds_the_stopped_worker_after_the_engine_is_sigkilled(tmp_path: Path) -> None:
    scenario = tmp_path / "sigkill-me-hang.yaml"
    scenario.write_text(SIGKILL_ME)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def stopped() -> bool:
            runs = list(out.glob("*/events.jsonl"))
            return bool(runs) and any(e.get("event") == "hang_started" for e in read_history(runs[0]))

        wait_for(stopped, 120, "the worker to be stopped")
        run_dir = next(out.glob("*/events.jsonl")).parent
        [started] = events(run_dir, "hang_started")
        proc.kill()
        proc.wait(timeout=10)
        assert psutil.Process(started["pid"]).status() == psutil.STATUS_STOPPED, "nobody healed it: still stopped"
        cleanup = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 timeout=60)
        assert cleanup.returncode == 0, cleanup.stderr
        assert not psutil.pid_exists(started["pid"]) or psutil.Process(started["pid"]).status() == "zombie"
        assert marked_processes(run_dir.name) == []
        assert f"process {started['pid']}" in cleanup.stdout, cleanup.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
