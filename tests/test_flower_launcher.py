"""The flower launcher's plans, without Flower or a cluster: roles, the server's address, refusals, doctor."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.launchers import flower as fll
from chaos.launchers.base import LaunchContext
from chaos.plan import Addressing


def _ctx(addresses: dict[str, str], port: int = 29400, script: list[str] | None = None) -> LaunchContext:
    cluster = SimpleNamespace(nodes=len(addresses), procs_per_node=1)
    return LaunchContext(scenario=SimpleNamespace(cluster=cluster), run_id="r-abc123", run_dir=Path("/tmp/run"),
                         net=Addressing(addresses, port, python="/venv/bin/python"),
                         base_env={"CHAOS_RUN_ID": "r-abc123", "PYTHONPATH": "/user"},
                         script=script or ["/repo/workloads/flower_train.py", "--rounds", "3"], settings={})


def test_node0_serves_the_others_are_clients_of_it() -> None:
    launch = fll.Flower().node_plans(_ctx({"node0": "10.0.0.1", "node1": "10.0.0.2", "node2": "10.0.0.3"}))
    assert [n.name for n in launch.nodes] == ["node0", "node1", "node2"] and launch.store is None
    assert [n.env["FLOWER_ROLE"] for n in launch.nodes] == ["server", "client", "client"]
    for i, node in enumerate(launch.nodes):
        assert node.env["FLOWER_SERVER_ADDRESS"] == "10.0.0.1:29400"  # every node reaches node0's address
        assert (node.env["RANK"], node.env["CHAOS_NODE"]) == (str(i), f"node{i}")  # rank names a client's shard
        assert node.env["PYTHONPATH"].endswith(":/user")
        assert node.argv == ["/venv/bin/python", "/repo/workloads/flower_train.py", "--rounds", "3"]


@pytest.mark.parametrize("script,argv", [
    (["python", "my_fl.py", "--x"], ["/venv/bin/python", "my_fl.py", "--x"]),  # the nodes' interpreter
    (["bash", "run.sh"], ["bash", "run.sh"]),
])
def test_user_commands(script: list[str], argv: list[str]) -> None:
    launch = fll.Flower().node_plans(_ctx({"node0": "a", "node1": "b"}, script=script))
    assert launch.nodes[1].argv == argv


def test_refusals_say_what_to_use_instead() -> None:
    refused = fll.Flower.refused_faults
    assert set(refused) == {"kill_worker", "oom_kill", "hang"}
    assert "crash" in refused["kill_worker"] and "freeze" in refused["hang"]
    assert fll.Flower().select_workers([], 1) == []
    assert fll.Flower.single_point_node == "node0" and "server" in (fll.Flower.single_point_of_failure or "")


def test_scenario_problems() -> None:
    scenario = SimpleNamespace(cluster=SimpleNamespace(nodes=1, procs_per_node=2),
                               workload=SimpleNamespace(name="ddp-mlp"))
    problems = fll.Flower.scenario_problems(scenario)  # type: ignore[arg-type]
    assert [p.split(":")[0] for p in problems] == ["cluster.nodes", "cluster.procs_per_node", "workload.name"]
    scenario = SimpleNamespace(cluster=SimpleNamespace(nodes=3, procs_per_node=1),
                               workload=SimpleNamespace(name="flower-mlp", args={"clients_per_round": 3}))
    (problem,) = fll.Flower.scenario_problems(scenario)  # type: ignore[arg-type]
    assert problem.startswith("workload.args.clients_per_round") and "2 client node(s)" in problem


def test_image_packages_and_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fll.Flower.image_packages() == ("flwr==1.42.0",)
    monkeypatch.setattr(fll, "flwr_version", lambda: (None, "flwr is not installed"))
    (check,) = fll.Flower.machine_checks()
    assert not check.ok and "torch-chaos[flower]" in check.fix
    monkeypatch.setattr(fll, "flwr_version", lambda: ("1.42.0", ""))
    (check,) = fll.Flower.machine_checks()
    assert check.ok and "1.42.0" in check.detail
