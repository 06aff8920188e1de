"""The Ray launcher without Ray running: what it refuses, the commands it plans, the workers it picks, what its
cleanup removes. The real runs are in tests/integration/test_ray_launcher.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.launchers import ray as ray_launcher
from chaos.launchers.ray import Ray, temp_root
from chaos.launchers.ray_node import RUN_ID_FILE
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.plan import build_plan


def scenario(faults: str = "  - {kind: kill_worker, target: 1, at_step: 10}\n", nodes: int = 3,
             workload: str = "{name: ray-mlp, args: {steps: 50}}") -> str:
    return f"name: r\ncluster: {{launcher: ray, nodes: {nodes}}}\nworkload: {workload}\nfaults:\n{faults}"


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioInvalid) as exc:
        parse_scenario(text, "s.yaml")
    return [str(e) for e in exc.value.errors]


@pytest.mark.parametrize("text, expected", [
    (scenario("  - {kind: kill_worker, target: 0, at_step: 10}\n"), "node0 is the Ray head and runs no Ray Train"),
    (scenario("  - {kind: hang, target: 1, at_step: 10}\n"), "hang does not apply to the ray launcher"),
    (scenario("  - {kind: segfault, target: 1, local_rank: 0, at_step: 10}\n"), "leave local_rank out"),
    (scenario(nodes=1), "at least one worker node"),
    (scenario(workload="{name: ddp-mlp, args: {steps: 50}}"), "ddp-mlp is started by torchrun"),
    (scenario("  - {kind: crash, target: store, at_step: 10}\n"), "no rendezvous"),
])
def test_what_does_not_apply_under_ray_is_refused_with_the_reason(text: str, expected: str) -> None:
    assert any(expected in e for e in errors_of(text)), errors_of(text)


def test_node0_is_the_head_running_the_driver_and_the_others_join_it(tmp_path: Path) -> None:
    s = parse_scenario(scenario(), "s.yaml")
    plan = build_plan(s, "20261206-000000-r-abc123", tmp_path)
    head, *workers = plan.nodes
    argv = head.argv
    assert argv[3] == "head" and argv[argv.index("--expect-workers") + 1] == "2"
    driver = argv[argv.index("--") + 1:]
    assert driver[1].endswith("workloads/ray_train.py") and "--checkpoint-dir" in driver
    assert argv[argv.index("--temp-dir") + 1] == f"{temp_root(plan.run_id)}/node0"
    gcs = f"127.0.0.1:{argv[argv.index('--port') + 1]}"
    for i, node in enumerate(workers, start=1):
        assert node.argv[3] == "worker" and node.argv[node.argv.index("--address") + 1] == gcs
        assert node.env["CHAOS_NODE"] == f"node{i}" and node.env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert not Path(temp_root(plan.run_id)).exists()  # planning (a dry run) creates nothing
    # the verdicts count a checkpoint as resumable once Ray's controller committed it (tests/test_ray_commits.py)
    assert plan.to_dict()["checkpoint_commit_file"] == "checkpoint_manager_snapshot.json"


class FakeProcess:
    def __init__(self, pid: int, cmdline: list[str]) -> None:
        self.pid, self._cmdline = pid, cmdline

    def cmdline(self) -> list[str]:
        return self._cmdline


def test_kill_worker_picks_the_ray_train_worker_actor_only() -> None:
    tree: list[Any] = [FakeProcess(1, ["python", "-c", "...", "worker"]), FakeProcess(2, ["/x/raylet", "--a"]),
                       FakeProcess(3, ["ray::RayTrainWorker", ""]), FakeProcess(4, ["ray::PreemptionWatcher"]),
                       FakeProcess(5, ["ray::RayTrainWorker.run_train_fn"])]
    assert [p.pid for p in Ray().select_workers(tree, 1)] == [3, 5]


def test_cleanup_removes_a_runs_ray_temp_dirs_once_its_processes_are_gone(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_launcher, "TEMP_PREFIX", f"{tmp_path}/tchaos-ray-")
    alive, dead = "20261206-000000-r-aaaaaa", "20261206-000000-r-bbbbbb"
    for run in (alive, dead):
        root = tmp_path / f"tchaos-ray-{run[-6:]}"
        (root / "node1" / "sockets").mkdir(parents=True)
        (root / RUN_ID_FILE).write_text(run)
    monkeypatch.setattr(ray_launcher, "marked_processes", lambda run: [object()] if run == alive else [])
    assert Ray.cleanup(None, only_orphans=True) == [f"Ray temp dir {tmp_path}/tchaos-ray-bbbbbb"]
    assert Ray.cleanup(alive, only_orphans=False) == [f"Ray temp dir {tmp_path}/tchaos-ray-aaaaaa"]
    assert Ray.cleanup(None, only_orphans=True) == []


def _ray_train() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ray_train", Path(__file__).parents[1] / "workloads" / "ray_train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports neither ray nor torch at the top: the training function does
    return module


def test_a_reported_checkpoint_counts_once_rays_controller_committed_it(tmp_path: Path) -> None:
    rt = _ray_train()
    assert not rt.committed(tmp_path, "step_00000025-abc")  # no snapshot yet
    (tmp_path / rt.SNAPSHOT).write_text('{"checkpoint_results": [{"checkpoint_dir_name": "step_00000025-abc"')
    assert rt.committed(tmp_path, "step_00000025-abc")  # a torn (half-rewritten) snapshot that names it
    assert not rt.committed(tmp_path, "step_00000025-ab")  # never a prefix of another folder's name


def test_the_planted_older_checkpoint_bug_takes_the_folder_before_the_one_ray_handed(tmp_path: Path) -> None:
    rt = _ray_train()
    for name in ("step_00000025-aaa", "step_00000050-aaa", "step_00000075-bbb", "step_00000100-bbb"):
        (tmp_path / name).mkdir()
        (tmp_path / name / rt.STATE_FILE).write_bytes(b"x")
    (tmp_path / "step_00000050-aaa" / rt.STATE_FILE).unlink()  # a folder without its state is no checkpoint
    assert rt.older_sibling(tmp_path / "step_00000100-bbb") == tmp_path / "step_00000075-bbb"
    assert rt.older_sibling(tmp_path / "step_00000075-bbb") == tmp_path / "step_00000025-aaa"
    assert rt.older_sibling(tmp_path / "step_00000025-aaa") is None
    assert rt._checkpoint_step("step_00000100-bbb") == 100 and rt._checkpoint_step("checkpoint_2026") is None
