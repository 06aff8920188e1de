"""The tf-multiworker launcher's plans, without TensorFlow or a cluster: TF_CONFIG, ports, refusals, doctor."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.launchers import tf as tfl
from chaos.launchers.base import LaunchContext
from chaos.plan import Addressing


def _ctx(addresses: dict[str, str], port: int = 29400, nodes: int = 2,
         script: list[str] | None = None) -> LaunchContext:
    cluster = SimpleNamespace(nodes=nodes, procs_per_node=1)
    return LaunchContext(scenario=SimpleNamespace(cluster=cluster), run_id="r-abc123", run_dir=Path("/tmp/run"),
                         net=Addressing(addresses, port, python="/venv/bin/python"),
                         base_env={"CHAOS_RUN_ID": "r-abc123", "PYTHONPATH": "/user"},
                         script=script or ["/repo/workloads/tf_train.py", "--epochs", "3"], settings={})


def test_tf_config_names_every_worker_and_the_task() -> None:
    cfg = json.loads(tfl.tf_config(["10.0.0.1:29400", "10.0.0.2:29400"], 1))
    assert cfg == {"cluster": {"worker": ["10.0.0.1:29400", "10.0.0.2:29400"]},
                   "task": {"type": "worker", "index": 1}}


def test_shared_address_gets_one_port_per_node() -> None:
    ports = iter([5001, 5001, 5002])  # a repeated free port is skipped
    got = tfl.worker_addresses(["127.0.0.1"] * 3, 5000, port_for=lambda: next(ports))
    assert got == ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]


def test_own_addresses_share_the_port() -> None:
    assert tfl.worker_addresses(["10.0.0.1", "10.0.0.2"], 29400) == ["10.0.0.1:29400", "10.0.0.2:29400"]


def test_node_plans_write_each_nodes_tf_config() -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "10.0.0.1", "node1": "10.0.0.2"}))
    assert [n.name for n in launch.nodes] == ["node0", "node1"] and launch.store is None and not launch.servers
    for i, node in enumerate(launch.nodes):
        cfg = json.loads(node.env["TF_CONFIG"])
        assert cfg["cluster"]["worker"] == ["10.0.0.1:29400", "10.0.0.2:29400"]
        assert cfg["task"] == {"type": "worker", "index": i}
        assert node.env["TF_USE_LEGACY_KERAS"] == "1"
        assert (node.env["RANK"], node.env["WORLD_SIZE"], node.env["CHAOS_NODE"]) == (str(i), "2", f"node{i}")
        assert node.env["PYTHONPATH"].endswith(":/user")  # the user's path kept, the repository's first
        assert node.argv == ["/venv/bin/python", "/repo/workloads/tf_train.py", "--epochs", "3"]


def test_local_nodes_get_distinct_ports() -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "127.0.0.1", "node1": "127.0.0.1"}, port=5000))
    workers = json.loads(launch.nodes[0].env["TF_CONFIG"])["cluster"]["worker"]
    assert workers[0] == "127.0.0.1:5000" and len(set(workers)) == 2
    assert json.loads(launch.nodes[1].env["TF_CONFIG"])["cluster"]["worker"] == workers  # one cluster for all


@pytest.mark.parametrize("script,argv", [
    (["python", "my_tf.py", "--x"], ["/venv/bin/python", "my_tf.py", "--x"]),  # the nodes' interpreter
    (["bash", "run.sh"], ["bash", "run.sh"]),
])
def test_user_commands(script: list[str], argv: list[str]) -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "a", "node1": "b"}, script=script))
    assert launch.nodes[0].argv == argv


def test_refusals_say_what_to_use_instead() -> None:
    refused = tfl.TfMultiWorker.refused_faults
    assert set(refused) == {"kill_worker", "oom_kill", "hang"}
    assert "crash" in refused["kill_worker"] and "freeze" in refused["hang"]
    assert tfl.TfMultiWorker().select_workers([], 1) == []  # the node's process is the worker


def test_scenario_problems() -> None:
    scenario = SimpleNamespace(cluster=SimpleNamespace(procs_per_node=2), workload=SimpleNamespace(name="ddp-mlp"))
    problems = tfl.TfMultiWorker.scenario_problems(scenario)  # type: ignore[arg-type]
    assert [p.split(":")[0] for p in problems] == ["cluster.procs_per_node", "workload.name"]


def test_image_packages_pin_tf_keras_with_tensorflow() -> None:
    assert tfl.TfMultiWorker.image_packages() == ("tensorflow==2.21.0", "tf-keras==2.21.0")


@pytest.mark.parametrize("versions,ok", [
    ({"tensorflow": "2.21.0", "tf-keras": "2.21.0"}, True),
    ({"tensorflow": "2.21.0", "tf-keras": "2.19.0"}, False),
])
def test_doctor_check(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], ok: bool) -> None:
    monkeypatch.setattr(tfl, "tf_versions", lambda: (versions, ""))
    (check,) = tfl.TfMultiWorker.machine_checks()
    assert check.ok is ok and "tensorflow 2.21.0" in check.detail


def test_doctor_check_without_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfl, "tf_versions", lambda: (None, "ModuleNotFoundError: No module named 'tensorflow'"))
    (check,) = tfl.TfMultiWorker.machine_checks()
    assert not check.ok and "No module named" in check.detail and "torch-chaos[tf]" in check.fix
