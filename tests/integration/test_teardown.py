"""Nothing is left behind: Ctrl-C or SIGTERM to `chaos run` in the middle of a fault still heals and tears down."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from chaos.history import read_history
from chaos.marks import marked_processes
from tests.runs import wait_for
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

FROZEN_FOR_A_MINUTE = """\
name: interrupt-me
cluster: {mode: elastic, nodes: 2, min_nodes: 2}
workload: {name: ddp-mlp, args: {steps: 5000, checkpoint_every: 50}}
faults:
  - {kind: freeze, target: 1, at_step: 40, duration: 60s}
checks: {golden: false}
limits: {deadline_s: 300, stall_timeout_s: 200}
"""


def start_frozen_run(tmp_path: Path, output: int | None) -> tuple[subprocess.Popen[str], Path, str]:
    """`chaos run` in a subprocess, returned once its node 1 is frozen (with the run's directory and id)."""
    scenario = tmp_path / "interrupt-me.yaml"
    scenario.write_text(FROZEN_FOR_A_MINUTE)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out), "--json"],
                            stdout=output, stderr=output, text=True)

    def frozen() -> bool:
        runs = list(out.glob("*/events.jsonl"))
        return bool(runs) and any(e.get("event") == "fault_injected" for e in read_history(runs[0]))

    try:
        wait_for(frozen, 120, "the freeze to be injected")
    except AssertionError:
        proc.terminate()  # SIGTERM: the engine still tears its nodes down
        proc.wait(timeout=60)
        raise
    run_id = next(out.glob("*/events.jsonl")).parent.name
    return proc, out, run_id


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=FULL)])  # Ctrl-C gates
def test_signal_mid_fault_tears_everything_down(tmp_path: Path, sig: signal.Signals) -> None:
    proc, out, run_id = start_frozen_run(tmp_path, subprocess.PIPE)
    try:
        stopped = [p for p in marked_processes(run_id) if p.status() == psutil.STATUS_STOPPED]
        assert stopped, "the frozen node's processes should be stopped"
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed before its signal: still leave nothing behind
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert proc.returncode == 130, stderr
    assert marked_processes(run_id) == []
    run_dir = out / run_id
    result = json.loads((run_dir / "result.json").read_text())
    assert result["verdict"] == "error" and result["end_reason"] == "interrupted"
    assert json.loads(stdout)["run_id"] == run_id
    events = read_history(run_dir / "events.jsonl")
    healed = [e for e in events if e.get("event") == "fault_healed"]
    assert healed and healed[0]["at_teardown"], "an active fault must be healed at teardown"
    assert events[-1]["event"] == "teardown"


def test_cleanup_after_the_engine_is_sigkilled_mid_fault(tmp_path: Path) -> None:
    """SIGKILL leaves the engine no chance to tear down: `chaos cleanup` must find and remove what it left."""
    proc, _, run_id = start_frozen_run(tmp_path, subprocess.DEVNULL)
    try:
        proc.kill()
        proc.wait(timeout=10)
        left = marked_processes(run_id)
        assert left, "a SIGKILLed engine cannot clean up: its nodes are still there"
        assert any(p.status() == psutil.STATUS_STOPPED for p in left), "and the frozen node is still frozen"
        cleanup = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 timeout=60)
        assert cleanup.returncode == 0, cleanup.stderr
        killed = int(re.search(r"removed (\d+) leftover", cleanup.stdout).group(1))  # type: ignore[union-attr]
        assert killed >= len(left)
        assert marked_processes(run_id) == []
        again = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True)
        assert "removed 0 leftover" in again.stdout, "cleanup is idempotent"
    finally:
        if proc.poll() is None:
            proc.kill()
