"""The memory faults for real: a memory cgroup limit the kernel's OOM killer enforces on a torchrun node, and a
co-located allocator; each gives its documented verdict, the history holds the kernel's own record of every OOM
kill, the limit comes back exactly, and an engine SIGKILLed mid-fault leaves nothing `chaos cleanup` cannot remove.

Three real runs: the two shipped scenarios (600 steps; oom-kill shares the golden run of the other shortened
scenarios, memory-pressure's workers hold more data and have one of their own) and a short two-node run killed
mid-fault. A SIGKILL crash must not read as an OOM kill: that side is the shipped
elastic-worker-crash run (shared with test_shipped_scenarios in a full session).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos import cgroup
from chaos.history import read_history
from chaos.marks import marked_processes
from chaos.reports.model import build_report
from chaos.reports.text import summary_rows
from tests.runs import run_shipped, wait_for
from tests.tiers import FULL, tiered

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

EXPECTED_VERDICT = {
    "process/oom-kill": "pass",
    "process/memory-pressure": "pass",
}
# The gate's memory run: the kernel's OOM killer under a node's memory limit (one run, two tests).
GATE = {"process/oom-kill"}


@pytest.fixture(autouse=True)
def memory_cgroups(machine_for: Any) -> None:
    problems = [c for c in cgroup.machine_checks() if not c.ok]
    if problems:
        pytest.skip(problems[0].detail)


def leftovers() -> list[str]:
    """Owner files of memory cgroups and limits torch-chaos made (each removed with what it names)."""
    return sorted(p.name for p in cgroup.OWNERS_DIR.glob("*.json")) if cgroup.OWNERS_DIR.is_dir() else []


def oom_events(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == "oom_killed"]


@pytest.mark.parametrize("name", tiered(sorted(EXPECTED_VERDICT), GATE))
def test_documented_verdict_and_nothing_left(name: str) -> None:
    result, run_dir = run_shipped(name)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    healed = [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == "fault_healed"]
    injected = result["faults"][0]
    assert injected["injected"] and "cgroup" in injected["mechanism"], injected
    assert all(e.get("restored") is True for e in healed), healed
    assert not [n for n in leftovers() if run_dir.name[-6:] in n]


def test_the_kernel_kills_a_worker_and_the_report_says_oom_killed() -> None:
    result, run_dir = run_shipped("process/oom-kill")
    history = read_history(run_dir / "events.jsonl")
    [injected] = [e for e in history if e.get("event") == "fault_injected"]
    details = injected["details"]
    assert details["restored"] is True and 0 <= details["time_to_oom_kill_s"] < 30
    kills = oom_events(run_dir)
    kill = kills[0]
    assert kill["node"] == "node1" and kill["role"] == "worker" and isinstance(kill["pid"], int), kill
    # Where the allocator cannot get oom_score_adj -1000 (no CAP_SYS_RESOURCE, as on this sandbox), a second kill
    # before the worker's memory is freed takes the allocator, by design never the launcher (chaos.faults.oom_kill).
    assert [k["role"] for k in kills[1:]] in ([], ["allocator"]), kills
    assert re.search(r"oom_kill \d+ -> \d+", kill["evidence"]) and "Killed process" in kill["evidence"], kill
    # The launcher saw what a SIGKILL looks like; only the kernel's record says it was the OOM killer.
    log = (run_dir / "logs" / "node1.log").read_text(errors="replace")
    assert "exitcode: -9" in log
    fault = result["faults"][0]
    assert [k["pid"] for k in fault["oom_kills"]] == [k["pid"] for k in kills] and fault["restarted"], fault
    # one row per kill, under the same label: the worker's is the first (a dict would keep only the last)
    oom_rows = [text for label, text in summary_rows(build_report(run_dir)) if label == "OOM-killed by the kernel"]
    assert len(oom_rows) == len(kills) and f"node1 pid {kill['pid']} (worker" in oom_rows[0], oom_rows


@FULL
def test_a_sigkill_crash_is_not_reported_as_an_oom_kill() -> None:
    result, run_dir = run_shipped("elastic-worker-crash")
    assert oom_events(run_dir) == [] and "oom_kills" not in result["faults"][0]
    assert "OOM-killed by the kernel" not in dict(summary_rows(build_report(run_dir)))


@FULL
def test_memory_pressure_records_what_the_kernel_did() -> None:
    result, run_dir = run_shipped("process/memory-pressure")
    history = read_history(run_dir / "events.jsonl")
    [healed] = [e for e in history if e.get("event") == "fault_healed"]
    kills = oom_events(run_dir)
    # The documented outcome (scenarios/process/memory-pressure.yaml): the allocator pushes the capped node over
    # its cap and the kernel kills the largest process in it, the worker first, never the launcher.
    assert kills and kills[0]["role"] == "worker" and {k["role"] for k in kills} <= {"worker", "allocator"}, kills
    assert healed["restored"] is True
    assert [k["pid"] for k in result["faults"][0]["oom_kills"]] == [k["pid"] for k in kills]


SIGKILL_ME = """\
name: sigkill-me
cluster: {mode: elastic, nodes: 2, min_nodes: 2}
workload: {name: ddp-mlp, args: {steps: 5000, checkpoint_every: 50}}
faults:
  - {kind: oom_kill, target: 1, at_step: 40, duration: 120s}
checks: {golden: false}
limits: {deadline_s: 300, stall_timeout_s: 200}
"""


@FULL
def test_cleanup_after_the_engine_is_sigkilled_with_a_limit_in_place(tmp_path: Path) -> None:
    scenario = tmp_path / "sigkill-me.yaml"
    scenario.write_text(SIGKILL_ME)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def limited() -> bool:
            runs = list(out.glob("*/events.jsonl"))
            return bool(runs) and any(e.get("event") == "fault_injected" for e in read_history(runs[0]))

        wait_for(limited, 150, "the OOM kill to be injected")
        run_dir = next(out.glob("*/events.jsonl")).parent
        injected = next(e for e in read_history(run_dir / "events.jsonl") if e.get("event") == "fault_injected")
        limited_dir = Path(injected["details"]["cgroup"])  # not `cgroup`: that is the module
        proc.kill()
        proc.wait(timeout=10)
        lay = cgroup.layout()
        assert lay is not None and limited_dir.is_dir(), "a SIGKILLed engine cannot heal: the limit is still there"
        assert cgroup.parse_limit((limited_dir / lay.limit).read_text(), lay) is not None
        assert [n for n in leftovers() if run_dir.name[-6:] in n], "the owner files name what is left"
        cleanup = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 timeout=60)
        assert cleanup.returncode == 0, cleanup.stderr
        assert not limited_dir.exists() and not limited_dir.parent.exists(), cleanup.stdout
        assert not [n for n in leftovers() if run_dir.name[-6:] in n], leftovers()
        assert marked_processes(run_dir.name) == []
        assert "memory cgroup" in cleanup.stdout, cleanup.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
