"""torchrun's ``etcd`` rendezvous over three etcd members, for real, on every runtime that runs them:

- local (members on the shared loopback): the member torchrun was pointed at (etcd0) is SIGKILLed, then a node;
  the other members serve the rendezvous and the job finishes;
- docker (a container and an address per member): the same faults, but a killed container takes its address
  with it, so connections to etcd0 time out as with a dead host: a race the scenario documents (the job regroups,
  or it hangs when an agent's keep-alive write met the members' leader election and its lease thread died);
- netns (a namespace per member): etcd0 is partitioned away for 20 s and a node crashes inside the partition;
  the job regroups after the heal.

Three real runs (300 steps, no golden run; ~65, ~80 and ~60 s on 2 shared cores); skipped, saying why, where
etcd, python-etcd, root or the image is missing (`chaos doctor`; under CI=true a missing piece fails).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.history import read_history
from tests.runs import run_shipped, shipped
from tests.tiers import FULL

# The whole file waits for --full: the gate's rendezvous fault is the docker store crash.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

CRASH = "rendezvous/etcd-member-and-node-crash"
PARTITION = "rendezvous/etcd-member-partition"
# (scenario, runtime) -> the verdict its documentation states
EXPECTED_VERDICT = {(CRASH, "local"): "pass", (CRASH, "docker"): "pass|hung", (PARTITION, "netns"): "pass"}


def run(name: str, runtime: str, machine_for: Any) -> tuple[dict[str, Any], Path, list[dict[str, Any]]]:
    machine_for(shipped(name, runtime))
    result, run_dir = run_shipped(name, runtime)
    assert result["verdict"] in EXPECTED_VERDICT[(name, runtime)].split("|"), (result["why"], run_dir)
    history = read_history(run_dir / "events.jsonl")
    started = [e["node"] for e in history if e.get("event") == "node_started" and e.get("role") == "server"]
    assert started == ["etcd0", "etcd1", "etcd2"], started
    return result, run_dir, history


def member_killed(history: list[dict[str, Any]]) -> dict[str, Any]:
    [member] = [e for e in history if e.get("event") == "fault_injected" and e.get("target") == "etcd0"]
    [exited] = [e for e in history if e.get("event") == "node_exited" and e.get("node") == "etcd0"]
    assert exited["role"] == "server" and exited["t"] >= member["t"]
    return exited


def test_local_the_other_members_serve_the_rendezvous(machine_for: Any) -> None:
    result, run_dir, history = run(CRASH, "local", machine_for)
    assert member_killed(history)["code"] == -9
    crash = next(f for f in result["faults"] if f["target"] == "node2")
    assert crash["restarted"] and crash["recovery_s"] is not None, crash
    # the other members served the rendezvous after etcd0 died: the job regrouped and finished
    assert result["end_reason"] == "completed"
    assert (run_dir / "logs" / "etcd1.log").stat().st_size > 0


def test_docker_a_dead_member_host_regroups_or_hangs_as_documented(machine_for: Any) -> None:
    """In containers the members are hosts of their own: the kill takes etcd0's address and the two live members
    elect a new leader (their own log says so). Measured: the survivors regrouped in three runs of six; in the
    other three an agent stayed blocked on etcd0's dead address or its lease thread died, and the job hung. Each
    outcome must come with its own evidence."""
    result, run_dir, history = run(CRASH, "docker", machine_for)
    exited = member_killed(history)
    assert exited["code"] == -9, exited  # docker kill: the container's 137, said as on every runtime
    logs = [(run_dir / "logs" / f"etcd{i}.log").read_text(errors="replace") for i in (1, 2)]
    assert any("became leader" in log for log in logs), "the surviving members never elected a leader"
    crash = next(f for f in result["faults"] if f["target"] == "node2")
    regrouped = [e for e in history if e.get("event") == "agent_rendezvous_completed" and e["t"] > exited["t"]]
    if result["verdict"] == "pass":
        assert crash["restarted"] and result["end_reason"] == "completed" and regrouped, crash
    else:
        # hung because the survivors never regrouped (not, say, a slow worker): no rendezvous after the kill
        assert result["end_reason"] == "hung" and not crash["restarted"], (result["why"], crash)
        assert not regrouped, regrouped


def test_netns_a_partitioned_member_delays_the_regroup_until_the_heal(machine_for: Any) -> None:
    result, run_dir, history = run(PARTITION, "netns", machine_for)
    isolate, crash = result["faults"]
    assert isolate["kind"] == "isolate" and isolate["target"] == "etcd0" and isolate["injected"], isolate
    [healed] = [e for e in history if e.get("event") == "fault_healed" and e.get("fault_id") == isolate["id"]]
    assert healed["restored"] is True, healed
    assert crash["restarted"] and crash["recovery_s"] is not None, crash
    # nobody regrouped while etcd0 was cut off: the first step after the crash comes after the heal
    resumed = [e for e in history if e.get("event") == "step_completed" and e["t"] > crash["t_injected"]]
    assert resumed and min(e["t"] for e in resumed) > healed["t"], (healed, run_dir)
    assert result["end_reason"] == "completed"
