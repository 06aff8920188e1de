"""torchrun's ``etcd`` rendezvous over three etcd members the local runtime runs, for real: the member torchrun
was pointed at (etcd0) is SIGKILLed, then a node; the shipped scenario gives its documented verdict. One real run
(300 steps, no golden run; 65 s on 2 shared cores); skipped, saying why, where etcd or python-etcd is missing
(`chaos doctor`)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.history import read_history
from chaos.loading import load_scenario, resolve_scenario_path
from tests.runs import run_shipped

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

EXPECTED_VERDICT = {"rendezvous/etcd-member-and-node-crash": "pass"}


@pytest.mark.parametrize("name", sorted(EXPECTED_VERDICT))
def test_documented_verdict_after_a_member_and_a_node_crash(name: str, machine_for: Any) -> None:
    machine_for(load_scenario(resolve_scenario_path(name)))
    result, run_dir = run_shipped(name)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    history = read_history(run_dir / "events.jsonl")
    started = [e["node"] for e in history if e.get("event") == "node_started" and e.get("role") == "server"]
    assert started == ["etcd0", "etcd1", "etcd2"], started
    [member] = [e for e in history if e.get("event") == "fault_injected" and e.get("target") == "etcd0"]
    [exited] = [e for e in history if e.get("event") == "node_exited" and e.get("node") == "etcd0"]
    assert exited["code"] == -9 and exited["role"] == "server" and exited["t"] >= member["t"]
    crash = next(f for f in result["faults"] if f["target"] == "node2")
    assert crash["restarted"] and crash["recovery_s"] is not None, crash
    # the other members served the rendezvous after etcd0 died: the job regrouped and finished
    assert result["end_reason"] == "completed"
    assert (run_dir / "logs" / "etcd1.log").stat().st_size > 0
