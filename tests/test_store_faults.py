"""``target: store``: validation (a dedicated store, a kind that can act on it, the runtime's capabilities) and the
engine's handling of the store as a fault target (stand-in runtime and kind, no processes). The real runs are
tests/integration/test_store_faults.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.engine import FaultScheduler, FaultStatus, NodeOrchestrator, NodeStatus
from chaos.loading import load_scenario, resolve_scenario_path
from chaos.plan import STORE_NODE, NodePlan, build_plan
from chaos.scenario import NodeRestart, Scenario, make_fault
from tests.test_engine_parts import Run, StopsNode, stand_in  # noqa: F401 (the fixture)


def validate(cluster: dict[str, Any], fault: dict[str, Any]) -> Scenario:
    return Scenario.model_validate({"name": "t", "workload": {"name": "ddp-mlp"}, "cluster": cluster,
                                    "faults": [fault]})


DEDICATED = {"nodes": 3, "min_nodes": 2, "rendezvous": {"store": "dedicated"}}


@pytest.mark.parametrize("fault", [{"kind": "crash", "target": "store", "at_step": 5},
                                   {"kind": "freeze", "target": "store", "at_step": 5, "duration": 3}])
def test_crash_and_freeze_take_the_dedicated_store_on_local(fault: dict[str, Any]) -> None:
    assert validate(DEDICATED, fault).faults[0].target == "store"


def test_isolate_takes_the_store_where_the_runtime_gives_nodes_a_network() -> None:
    fault = {"kind": "isolate", "target": "store", "at_step": 5, "duration": 3}
    assert validate({**DEDICATED, "runtime": "netns"}, fault).faults[0].target == "store"
    with pytest.raises(ValueError, match=r"faults\[0\]\.kind: isolate needs a runtime that gives each node a network "
                                         r"stack of its own.*set cluster.runtime: docker or netns"):
        validate(DEDICATED, fault)


def test_the_store_target_needs_a_dedicated_store() -> None:
    with pytest.raises(ValueError, match=r"faults\[0\]\.target: store means the dedicated rendezvous store.*"
                                         r"set rendezvous: \{store: dedicated\}"):
        validate({"nodes": 3}, {"kind": "crash", "target": "store", "at_step": 5})
    with pytest.raises(ValueError, match=r"faults\[0\]\.target: a centralized job has no rendezvous store"):
        validate({"mode": "centralized", "nodes": 1}, {"kind": "crash", "target": "store", "at_step": 5})


@pytest.mark.parametrize("kind", ["kill_worker", "segfault"])
def test_kinds_that_need_workers_refuse_the_store(kind: str) -> None:
    with pytest.raises(ValueError, match=rf"faults\[0\]\.target: {kind} cannot act on the rendezvous store.*"
                                         r"kinds that can: crash, freeze, isolate"):
        validate(DEDICATED, {"kind": kind, "target": "store", "at_step": 5})


def test_a_file_names_the_line_and_field(tmp_path: Path) -> None:
    from chaos.admission import admit

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {name: ddp-mlp}\ncluster: {nodes: 2}\n"
                    "faults:\n  - {kind: crash, target: store, at_step: 5}\n")
    with pytest.raises(Exception) as refused:
        admit(path, None, machine=False)
    assert f"{path}:5: faults[0].target: store means the dedicated rendezvous store" in str(refused.value)


@pytest.mark.parametrize("name", ["store/store-crash", "store/store-freeze", "store/store-partition"])
def test_the_shipped_store_scenarios_plan_a_store_fault(name: str, tmp_path: Path) -> None:
    scenario = load_scenario(resolve_scenario_path(name))
    plan = build_plan(scenario, "r", tmp_path)
    assert plan.store is not None and any(f.target == "store" for f in scenario.faults)
    assert "chaos.store_server" in " ".join(plan.store.argv) and "sys.path.insert" in plan.store.argv[2]


class StoreRun(Run):
    """The engine parts with a dedicated store in the plan."""

    def __init__(self, tmp_path: Path, faults: list[Any]):
        super().__init__(tmp_path, faults, nodes=2)
        self.plan.store = NodePlan(STORE_NODE, None, ["true"], {}, role="store")
        self.nodes = NodeOrchestrator(self.runtime, self.plan, NodeRestart(), self.history,  # type: ignore[arg-type]
                                      self.notes.append)
        self.faults = FaultScheduler(faults, self.runtime, self.plan, self.history, tmp_path / "acks",  # type: ignore[arg-type]
                                     self.nodes, self.progress, self.notes.append)


@pytest.mark.usefixtures("stand_in")
def test_a_store_fault_stops_the_store_and_heals_it(tmp_path: Path) -> None:
    run = StoreRun(tmp_path, [make_fault(kind="freeze", target="store", at_step=3, duration=2.0)])
    run.nodes.start_cluster()
    assert run.runtime.started[0] == STORE_NODE and run.nodes.store_status() is NodeStatus.RUNNING
    run.job("step_completed", step=3)
    run.tick(now=10.0)
    [fault] = run.faults.faults
    assert fault.status is FaultStatus.ACTIVE and fault.node == STORE_NODE
    assert run.nodes.store_status() is NodeStatus.FROZEN
    run.tick(now=fault.heal_at + 0.01)  # type: ignore[operator]
    assert fault.status is FaultStatus.HEALED and run.nodes.store_status() is NodeStatus.RUNNING
    [injected] = [e for e in run.engine_events() if e["event"] == "fault_injected"]
    assert injected["target"] == "store" and injected["details"] == {"seen": "store"}
    assert StopsNode.healed == [0]


@pytest.mark.usefixtures("stand_in")
def test_a_fault_on_a_dead_store_is_skipped_and_says_why(tmp_path: Path) -> None:
    run = StoreRun(tmp_path, [make_fault(kind="crash", target="store", at_step=3)])
    run.nodes.start_cluster()
    run.runtime.codes[STORE_NODE] = -9
    run.tick(now=1.0)
    [exited] = [e for e in run.engine_events() if e["event"] == "node_exited"]
    assert exited == {**exited, "node": "store", "code": -9, "role": "store"}
    assert run.nodes.store_status() is NodeStatus.DEAD
    run.job("step_completed", step=3)
    run.tick(now=2.0)
    assert run.faults.faults[0].status is FaultStatus.SKIPPED
    [skipped] = [e for e in run.engine_events() if e["event"] == "fault_skipped"]
    assert skipped["target"] == "store" and skipped["why"] == "store is dead"
    run.tick(now=3.0)  # the store's exit is recorded once
    assert len([e for e in run.engine_events() if e["event"] == "node_exited"]) == 1
