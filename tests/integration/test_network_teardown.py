"""The engine SIGKILLed in the middle of network faults: `chaos cleanup` leaves the machine exactly as it was.

A SIGKILLed engine heals nothing: its namespaces or containers, their iptables rules and qdiscs, and the NFQUEUE
delayer stay behind. The test records the machine's state before the run (namespaces, labelled containers and
networks, the host's own iptables rules and qdiscs, torch-chaos processes), proves the leftovers exist after the
kill, and that one `chaos cleanup` brings every one of those back (and a second finds nothing).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.history import read_history
from chaos.loading import parse_scenario
from chaos.marks import marked_processes
from tests.conftest import network_objects
from tests.runs import wait_for
from tests.tiers import FULL

# alone: the checks compare every torch-chaos process and the host's rules and qdiscs, whoever made them
# The whole file waits for --full: the gate's teardown runs are test_teardown.py's.
pytestmark = [pytest.mark.integration, pytest.mark.alone, pytest.mark.usefixtures("no_leftovers"), FULL]

NETWORK_FAULTS_FOR_MINUTES = """\
name: kill-me-mid-network-fault
cluster: {{runtime: {runtime}, nodes: 3, min_nodes: 2}}
workload: {{name: ddp-mlp, args: {{steps: 5000, checkpoint_every: 50}}}}
faults:
  - {{kind: delay, target: 1, at_step: 40, delay: 50ms, duration: 300s}}
  - {{kind: loss, target: 1, at_step: 40, loss_percent: 5}}
  - {{kind: partition, groups: [[0], [2]], one_way: true, at_step: 40, duration: 300s}}
checks: {{golden: false}}
limits: {{deadline_s: 400, stall_timeout_s: 300}}
"""


def _host(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    return re.sub(r"\[\d+:\d+\]", "", "\n".join(line for line in out.splitlines() if not line.startswith("#")))


def machine_state() -> dict[str, Any]:
    return {
        "objects": network_objects(),
        "host_iptables": _host(["iptables-save"]),
        "host_qdiscs": _host(["tc", "qdisc", "show"]),
        "processes": {p.pid for p in marked_processes(None)},
        "delayers": _host(["pgrep", "-f", "chaos.net.delayer"]).split(),
    }


def start_impaired_run(tmp_path: Path, runtime: str) -> tuple[subprocess.Popen[bytes], Path]:
    scenario = tmp_path / "kill-me.yaml"
    scenario.write_text(NETWORK_FAULTS_FOR_MINUTES.format(runtime=runtime))
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out), "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def all_injected() -> bool:
        runs = list(out.glob("*/events.jsonl"))
        return bool(runs) and len([e for e in read_history(runs[0]) if e.get("event") == "fault_injected"]) == 3

    try:
        wait_for(all_injected, 180, "the three network faults to be injected")
    except AssertionError:
        proc.terminate()
        proc.wait(timeout=90)
        raise
    return proc, next(out.glob("*/events.jsonl")).parent


@pytest.mark.parametrize("runtime", ["netns", "docker"])
def test_cleanup_after_sigkill_mid_network_fault(tmp_path: Path, runtime: str,
                                                 machine_for: Callable[[Any], None]) -> None:
    machine_for(parse_scenario(NETWORK_FAULTS_FOR_MINUTES.format(runtime=runtime)))
    before = machine_state()
    proc, run_dir = start_impaired_run(tmp_path, runtime)
    try:
        events = read_history(run_dir / "events.jsonl")
        mechanisms = {e["kind"]: e["details"]["mechanism"] for e in events if e.get("event") == "fault_injected"}
        proc.kill()
        proc.wait(timeout=10)
        during = machine_state()
        assert during["objects"] - before["objects"], "the run's namespaces or containers are still there"
        assert set(during["processes"]) - before["processes"], "and its processes"
        if mechanisms["delay"] == "nfqueue":
            assert set(during["delayers"]) - set(before["delayers"]), "and the NFQUEUE delayer"
        cleanup = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 timeout=120)
        assert cleanup.returncode == 0, cleanup.stderr
        after = machine_state()
        assert after == before, (cleanup.stdout, before, after)
        again = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                               timeout=120)
        assert "removed 0 leftover" in again.stdout, again.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, timeout=120)


@pytest.mark.parametrize("runtime", ["netns", "docker"])
def test_sigterm_mid_network_fault_heals_and_tears_down(tmp_path: Path, runtime: str,
                                                       machine_for: Callable[[Any], None]) -> None:
    machine_for(parse_scenario(NETWORK_FAULTS_FOR_MINUTES.format(runtime=runtime)))
    before = machine_state()
    proc, run_dir = start_impaired_run(tmp_path, runtime)
    try:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert machine_state() == before
    healed = [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == "fault_healed"]
    # three faults, two of them (delay, and loss without a duration) in node 1's namespace at once: each healed at
    # teardown, each leaving the namespace as it found it apart from the other's still-active rules
    assert len(healed) == 3 and all(e["at_teardown"] for e in healed), healed
    assert all(e["restored"] is True for e in healed), healed
