"""Faults on the dedicated c10d rendezvous store (``target: store``), for real: the shipped scenarios
scenarios/store/*.yaml give their documented verdicts, and the history shows what the store fault did.

Three real runs of 300 steps without golden runs (~100-200 s in all on 2 shared cores, most of it the
stalls being measured): a crashed store ends the job within seconds (torchrun cannot
recover from a lost store); a frozen store (local) and a partitioned store (netns) cost nothing until a node
crash needs a rendezvous, which then waits for the heal. The partition run is skipped, saying why, where netns
cannot run (not root, no iptables).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.history import read_history
from chaos.loading import load_scenario, resolve_scenario_path
from tests.runs import run_shipped
from tests.tiers import FULL

# The whole file waits for --full: the gate's store fault is the docker store crash (test_process_faults_docker.py).
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

EXPECTED_VERDICT = {
    "store/store-crash": "fail",
    "store/store-freeze": "pass",
    "store/store-partition": "pass",
}


def run(name: str, machine_for: Any) -> tuple[dict[str, Any], Path, list[dict[str, Any]]]:
    machine_for(load_scenario(resolve_scenario_path(name)))
    result, run_dir = run_shipped(name)
    return result, run_dir, read_history(run_dir / "events.jsonl")


def events(history: list[dict[str, Any]], name: str, **fields: Any) -> list[dict[str, Any]]:
    return [e for e in history if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())]


@pytest.mark.parametrize("name", sorted(EXPECTED_VERDICT))
def test_documented_verdict(name: str, machine_for: Any) -> None:
    result, run_dir, history = run(name, machine_for)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    [store_fault] = events(history, "fault_injected", target="store")
    assert store_fault["kind"] in ("crash", "freeze", "isolate"), store_fault
    assert all(f["injected"] for f in result["faults"]), result["faults"]


def test_a_crashed_store_ends_the_job_within_seconds(machine_for: Any) -> None:
    result, run_dir, history = run("store/store-crash", machine_for)
    [crash] = events(history, "fault_injected", kind="crash", target="store")
    assert "SIGKILL" in crash["mechanism"]
    [store_exit] = events(history, "node_exited", node="store")
    assert store_exit["code"] == -9 and store_exit["t"] - crash["t"] < 2, store_exit
    exits = [e for e in events(history, "node_exited") if e.get("node") != "store"]
    # Every agent fails on its next store call: none survives, none waits for a timeout.
    assert sorted(e["node"] for e in exits) == ["node0", "node1", "node2"], exits
    assert all(e["code"] == 1 and e["t"] - crash["t"] < 10 for e in exits), [
        (e["node"], e["code"], round(e["t"] - crash["t"], 2)) for e in exits]
    assert result["end_reason"] == "failed", result["why"]
    log = (run_dir / "logs" / "node0.log").read_text(errors="replace")
    assert "The connection to the C10d store has failed" in log


@pytest.mark.parametrize("name", ["store/store-freeze", "store/store-partition"])
def test_a_stopped_store_holds_a_crash_recovery_until_it_heals(name: str, machine_for: Any) -> None:
    result, _, history = run(name, machine_for)
    [store_fault] = events(history, "fault_injected", target="store")
    [healed] = events(history, "fault_healed", fault_id=store_fault["fault_id"])
    [crash] = events(history, "fault_injected", kind="crash", target="node2")
    assert store_fault["t"] < crash["t"] < healed["t"], (store_fault, crash, healed)
    assert healed.get("restored", True) is True, healed  # a network heal compares iptables with its snapshot
    assert not events(history, "node_exited", node="store"), "the store must live through the fault"
    crash_metrics = next(f for f in result["faults"] if f["target"] == "node2")
    # The survivors regroup only once the store answers again.
    assert crash_metrics["restarted"] and crash_metrics["recovery_s"] >= healed["t"] - crash["t"], crash_metrics
