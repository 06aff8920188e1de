"""Launchers are plug-ins: the built-ins resolve from cluster.mode as before, the launcher builds the plan, and a
launcher with packages of its own gets a node image of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.analysis.hangs import single_point_lost
from chaos.image import image_tag, image_with
from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.loading import ScenarioInvalid, load_scenario
from chaos.plan import build_plan
from chaos.registry import launcher_of, launcher_plugins


def _scenario(tmp_path: Path, cluster: str, faults: str = "[]") -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {cluster}\nworkload: {{name: ddp-mlp}}\nfaults: {faults}\n")
    return load_scenario(path)


def test_the_built_in_launchers_are_registered_with_their_modes() -> None:
    plugins = launcher_plugins()
    assert plugins["torchrun"].mode == "elastic" and plugins["process"].mode == "centralized"
    assert plugins["torchrun"].rendezvous and not plugins["process"].rendezvous


@pytest.mark.parametrize(("cluster", "launcher", "mode"), [
    ("{nodes: 2}", "torchrun", "elastic"),
    ("{mode: elastic, nodes: 2}", "torchrun", "elastic"),
    ("{mode: centralized, nodes: 1}", "process", "centralized"),
    ("{launcher: process, nodes: 1}", "process", "centralized"),
    ("{launcher: torchrun, mode: elastic, nodes: 2}", "torchrun", "elastic"),
])
def test_mode_still_names_the_built_in_launcher(tmp_path: Path, cluster: str, launcher: str, mode: str) -> None:
    c = _scenario(tmp_path, cluster).cluster
    assert (c.launcher, c.mode, launcher_of(c).name) == (launcher, mode, launcher)


def test_a_mode_that_contradicts_the_launcher_is_refused_with_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(ScenarioInvalid) as info:
        _scenario(tmp_path, "{launcher: process, mode: elastic, nodes: 1}")
    assert "mode: elastic does not match launcher: process, whose mode is centralized; drop mode" in str(info.value)


def test_a_single_node_launcher_refuses_more_nodes(tmp_path: Path) -> None:
    with pytest.raises(ScenarioInvalid) as info:
        _scenario(tmp_path, "{launcher: process, nodes: 2}")
    assert "a centralized job runs on exactly 1 node (set nodes: 1)" in str(info.value)


def test_the_plan_is_built_by_the_launcher(tmp_path: Path) -> None:
    elastic = build_plan(_scenario(tmp_path, "{nodes: 2}"), "r-000001", tmp_path / "run")
    assert elastic.launcher is not None and elastic.launcher.name == "torchrun"
    assert all("--nnodes=2:2" in n.argv for n in elastic.nodes) and elastic.to_dict()["launcher"] == "torchrun"
    single = build_plan(_scenario(tmp_path, "{mode: centralized, nodes: 1}"), "r-000002", tmp_path / "run2")
    assert single.store_host is None and single.store_port is None
    assert not any("torch.distributed.run" in a for a in single.nodes[0].argv)


class _Refusing(Launcher):
    name = "refusing"
    mode = "elastic"
    refused_faults: ClassVar[dict[str, str]] = {"freeze": "its nodes cannot be stopped"}

    def node_plans(self, ctx: LaunchContext) -> Launch:
        return Launch([])


def test_the_default_worker_selection_is_everything_under_the_node_process() -> None:
    class P:
        def __init__(self, pid: int):
            self.pid = pid

    tree = [P(1), P(2), P(3)]
    assert [p.pid for p in _Refusing().select_workers(tree, 1)] == [2, 3]  # type: ignore[arg-type]
    assert _Refusing().describe()["launcher"] == "refusing"


def test_a_launcher_with_packages_gets_an_image_of_its_own() -> None:
    assert image_with(()) == image_tag()
    one = image_with(("ray[train]==2.60.0",), base="torch-chaos:aaa")
    assert one.startswith("torch-chaos-extra:") and one != image_with(("ray[train]==2.60.0",), base="torch-chaos:bbb")
    assert one != image_with(("ray[train]==2.61.0",), base="torch-chaos:aaa")
    assert one == image_with(("ray[train]==2.60.0",), base="torch-chaos:aaa")


def _history(env: dict[str, Any], target: str, disruptive: bool = True) -> list[dict[str, Any]]:
    return [{"event": "run_started", "t": 0.0, "environment": env},
            {"event": "fault_injected", "t": 5.0, "fault_id": 0, "kind": "crash", "target": target,
             "disruptive": disruptive, "mechanism": "SIGKILL", "details": {}, "trigger_event": None, "max_step": 9}]


def test_a_run_that_lost_its_launchers_single_point_of_failure_says_so() -> None:
    env = {"launcher": "ray", "single_point_node": "node0",
           "single_point_of_failure": "node0 (the Ray head: the GCS and the driver)"}
    assert single_point_lost(_history(env, "node0")) == (  # type: ignore[arg-type]
        "crash hit node0, the job's single point of failure under the ray launcher: node0 (the Ray head: the GCS "
        "and the driver); no restart policy brings the job back from it")
    assert single_point_lost(_history(env, "node1")) is None  # type: ignore[arg-type]
    assert single_point_lost(_history(env, "node0", disruptive=False)) is None  # type: ignore[arg-type]
    assert single_point_lost(_history({"launcher": "torchrun"}, "node0")) is None  # type: ignore[arg-type]


def test_compare_names_a_launchers_own_setup() -> None:
    from chaos.compare import setup_steps

    node = {"role": "node", "argv": ["python", "-c", "from chaos.launchers.ray_node import main", "head", "--",
                                     "python", "ray_train.py"]}
    plan = {"launcher": "ray", "nodes": [dict(node, name=f"node{i}") for i in range(3)], "checkpoint_dir": "/c",
            "resources": {"cpus_per_node": 1}}
    steps = setup_steps(plan, {"policy": "on-failure", "delay_s": 1, "max_restarts": 10})
    assert steps[1] == "start the ray launcher's node process on each of the 3 hosts (the job: ray_train.py)"
    assert "the ray cluster's ports" in steps[2] and "rendezvous" not in " ".join(steps)
    assert steps[-1] == "a supervisor that restarts a failed host's ray node process (after 1 s, at most 10 times)"
