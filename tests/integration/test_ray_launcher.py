"""`launcher: ray` for real: a Ray cluster (head + worker nodes through chaos.launchers.ray_node) runs Ray Train's
TorchTrainer (workloads/ray_train.py) under each fault of scenarios/ray/, with its documented verdict.

The gate runs one: a Ray Train worker SIGKILLed on the local runtime, which must pass with its recovery measured and
all four checkpoint verdicts checked (~4 min here on 2 cores: the golden run and the faulted run each start a Ray
cluster, ~45 s to the first step). The rest waits for --full. Each test leaves nothing behind (`no_leftovers`: no
marked process; the Ray launcher's teardown also removes Ray's unmarked agents and its temp dirs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos.history import read_history
from chaos.launchers.ray import TEMP_PREFIX, temp_root
from tests.runs import run_scenario, shipped
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

EXPECTED_VERDICT = {
    "ray/worker-crash": "pass",
    "ray/worker-node-crash": "pass",
    "ray/head-crash": "hung",
    "ray/partition": "pass",
    "ray/slow-checkpoint-store": "pass",
    "ray/bug-ignore-checkpoint": "fail",
    "ray/worker-freeze": "pass",
}
FOUR = ("digests_ok", "resumed_from_newest_valid", "exactly_once", "matches_golden")


def run(name: str, runtime: str | None = None) -> tuple[dict[str, Any], Path]:
    return left_nothing(*run_scenario(shipped(name, runtime=runtime)))


def run_byo(name: str) -> tuple[dict[str, Any], Path]:
    """An examples/byo scenario of the plain Ray Train script, as shipped (its script path made absolute)."""
    from chaos.loading import parse_scenario
    from tests.byo_scenarios import byo_text

    return left_nothing(*run_scenario(parse_scenario(byo_text(name), f"{name}.yaml")))


def left_nothing(result: dict[str, Any], run_dir: Path) -> tuple[dict[str, Any], Path]:
    assert not Path(temp_root(result["run_id"])).exists(), f"the run's Ray temp dirs are left ({TEMP_PREFIX}...)"
    ray_left = [p.pid for p in psutil.process_iter(["cmdline"])
                if (p.info["cmdline"] or [""])[0].startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent"))]
    assert ray_left == [], f"Ray agents outlived the run: {ray_left}"
    return result, run_dir


def events(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == name]


def test_ray_restarts_a_killed_train_worker_from_its_newest_committed_checkpoint() -> None:
    result, run_dir = run("ray/worker-crash")
    assert result["verdict"] == EXPECTED_VERDICT["ray/worker-crash"], (result["why"], run_dir)
    [fault] = result["faults"]
    assert "RayTrainWorker" in fault["mechanism"] or "worker process" in fault["mechanism"], fault["mechanism"]
    assert fault["recovery_s"] is not None and 0 < fault["recovery_s"] < 180, fault
    for verdict in FOUR:
        assert result["checkpoint"][verdict]["ok"] is True, (verdict, result["checkpoint"][verdict])
    assert result["checkpoint"]["matches_golden"]["mode"] == "bitwise", result["checkpoint"]["matches_golden"]
    # the new worker group loaded the checkpoint Ray's controller had committed, on both ranks
    loads = events(run_dir, "checkpoint_loaded")
    assert {e["rank"] for e in loads} == {0, 1} and len({e["incarnation"] for e in loads}) == 1, loads
    # the recovery in Ray's terms, in order: each phase ended by its own mark (the controller's lines, the probe's
    # loads). The controller's lines reach the history through Ray's log forwarding, so the probe's load can be
    # stamped before "worker group started": then restore and first step are one span, and not_measured says why
    # (--full saw it twice in one session); detection is always the controller's decision, apart.
    breakdown = fault["recovery_breakdown"]
    phases = [p["phase"] for p in breakdown["phases"]]
    assert " + ".join(phases) == "detection + worker-group restart + checkpoint restore + first step", fault
    assert phases[0] == "detection", fault
    merged = {name for p in phases if " + " in p for name in p.split(" + ")[:-1]}
    assert merged <= {x["phase"] for x in breakdown["not_measured"]}, breakdown


@FULL
def test_ray_in_containers_restarts_a_killed_train_worker() -> None:
    """The same worker crash with every node a container of the node image plus Ray (built on first use)."""
    result, run_dir = run("ray/worker-crash", runtime="docker")
    assert result["verdict"] == "pass", (result["why"], run_dir)
    assert result["environment"]["image"].startswith("torch-chaos-extra:"), result["environment"]
    assert result["faults"][0]["recovery_s"] is not None, result["faults"][0]
    assert all(result["checkpoint"][v]["ok"] is True for v in FOUR), result["checkpoint"]


@FULL
def test_a_lost_worker_node_is_replaced_by_the_spare_one() -> None:
    result, run_dir = run("ray/worker-node-crash")
    assert result["verdict"] == EXPECTED_VERDICT["ray/worker-node-crash"], (result["why"], run_dir)
    assert result["faults"][0]["recovery_s"] is not None, result["faults"][0]
    assert all(result["checkpoint"][v]["ok"] is True for v in FOUR), result["checkpoint"]
    # the crashed node is rank 0's (the target is the save's node: Ray places the workers on any two of three)
    fault = result["faults"][0]
    after = {e["node"] for e in events(run_dir, "process_started") if e["t"] > fault["t_injected"]}
    assert fault["target"] not in after and len(after) == 2, (fault["target"], after)
    assert fault["restarted"] is True and fault["resumed_from"] >= 100, fault


@FULL
def test_losing_the_head_leaves_the_workers_waiting_at_their_next_report() -> None:
    result, run_dir = run("ray/head-crash")
    assert result["verdict"] == EXPECTED_VERDICT["ray/head-crash"], (result["why"], run_dir)
    assert result["end_reason"] != "completed", result
    # the workers ran on to their next ray.train.report (every 25 steps), whose barrier died with the head
    assert result["steps_completed"] % 25 == 0 and result["steps_completed"] > 110, result["steps_completed"]


@FULL
def test_a_partitioned_worker_node_costs_a_worker_group_restart() -> None:
    result, run_dir = run("ray/partition")
    assert result["verdict"] == EXPECTED_VERDICT["ray/partition"], (result["why"], run_dir)


@FULL
def test_a_slow_checkpoint_store_slows_the_reports_and_fails_nothing() -> None:
    result, run_dir = run("ray/slow-checkpoint-store")
    assert result["verdict"] == EXPECTED_VERDICT["ray/slow-checkpoint-store"], (result["why"], run_dir)
    assert result["checkpoint"]["matches_golden"]["mode"] == "bitwise", result["checkpoint"]["matches_golden"]


@FULL
def test_a_restart_that_ignores_get_checkpoint_fails_as_lost_progress() -> None:
    result, run_dir = run("ray/bug-ignore-checkpoint")
    assert result["verdict"] == EXPECTED_VERDICT["ray/bug-ignore-checkpoint"], (result["why"], run_dir)
    resumed = result["checkpoint"]["resumed_from_newest_valid"]
    assert resumed["ok"] is False and resumed["verdict"] == "lost_all_progress", resumed


@FULL
def test_the_plain_ray_train_script_passes_a_worker_crash_judged_from_its_output_and_files() -> None:
    """No probe: its printed epochs (each printed twice by Ray, counted once) and the checkpoint folders the
    storage layer saw, each counted once a save of Ray's commit file followed it (tests/test_ray_commits.py: a kill
    before the controller's poll resumes from the previous, committed folder)."""
    result, run_dir = run_byo("ray-plain-worker-crash")
    assert result["verdict"] == "pass", (result["why"], result["checkpoint"], run_dir)
    assert result["steps_completed"] == 40, result
    assert len(events(run_dir, "process_started")) == 2, "one round before the kill, one after (each line once)"
    fault = result["faults"][0]
    assert fault["restarted"] is True and fault["recovery_s"] is not None, fault
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is True, result["checkpoint"]


@FULL
def test_the_plain_script_that_ignores_get_checkpoint_fails_for_that_cause() -> None:
    result, run_dir = run_byo("ray-plain-ignore-checkpoint")
    assert result["verdict"] == "fail", (result["why"], run_dir)
    resumed = result["checkpoint"]["resumed_from_newest_valid"]
    assert resumed["ok"] is False and resumed["verdict"] == "lost_all_progress", resumed


@FULL
def test_the_plain_script_that_restarts_its_epochs_fails_as_steps_trained_twice() -> None:
    """--bug epoch-not-restored: the weights come back from get_checkpoint(), the loop from epoch 0."""
    result, run_dir = run_byo("ray-plain-epoch-not-restored")
    assert result["verdict"] == "fail", (result["why"], run_dir)
    once = result["checkpoint"]["exactly_once"]
    assert once["ok"] is False and once["verdict"] == "steps_trained_twice", once
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is True, result["checkpoint"]
    assert result["faults"][0]["lost_steps"] >= 11, result["faults"][0]


@FULL
def test_a_frozen_worker_node_ends_as_documented() -> None:
    result, run_dir = run("ray/worker-freeze")
    assert result["verdict"] == EXPECTED_VERDICT["ray/worker-freeze"], (result["why"], run_dir)


LONG_RAY_RUN = """\
name: ray-kill-the-engine
cluster: {launcher: ray, nodes: 3}
workload: {name: ray-mlp, args: {steps: 5000, checkpoint_every: 25, step_time_ms: 50}}
checks: {golden: false}
limits: {deadline_s: 400, stall_timeout_s: 200}
"""


def ray_processes_of(root: Path) -> list[int]:
    """Every process that is Ray's (its title) or holds a file under the run's Ray temp dirs."""
    prefix = str(root) + "/"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            title = " ".join(proc.info["cmdline"] or [])
            paths = [f.path for f in proc.open_files()]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith("ray::") or "raylet" in title or "gcs_server" in title or any(
                p.startswith(prefix) for p in paths):
            found.append(proc.pid)
    return found


@FULL
def test_cleanup_after_the_engine_is_sigkilled_mid_run_leaves_no_ray_process(tmp_path: Path) -> None:
    """SIGKILL leaves the engine no teardown: `chaos cleanup` must stop every Ray process of the run (the marked
    raylets, GCS and workers, and the unmarked DashboardAgent and RuntimeEnvAgent) and remove its temp dirs."""
    import subprocess
    import sys

    from chaos.marks import marked_processes
    from tests.runs import wait_for

    scenario = tmp_path / "ray-kill-the-engine.yaml"
    scenario.write_text(LONG_RAY_RUN)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def training() -> bool:
        runs = list(out.glob("*/events.jsonl"))
        return bool(runs) and any(e.get("event") == "step_completed" for e in read_history(runs[0]))

    try:
        wait_for(training, 240, "the Ray Train workers' first step")
        run_id = next(out.glob("*/events.jsonl")).parent.name
        root = Path(temp_root(run_id))
        proc.kill()
        proc.wait(timeout=10)
        assert marked_processes(run_id), "a SIGKILLed engine cannot tear down: its Ray nodes are still there"
        assert root.exists() and ray_processes_of(root)
        cleanup = subprocess.run([sys.executable, "-m", "chaos", "cleanup"], capture_output=True, text=True,
                                 timeout=120)
        assert cleanup.returncode == 0, cleanup.stderr
        assert f"Ray temp dir {root}" in cleanup.stdout, cleanup.stdout
        wait_for(lambda: not ray_processes_of(root), 15, "the last Ray process to go")
        assert marked_processes(run_id) == []
        assert not root.exists(), f"{root} is left"
    finally:
        if proc.poll() is None:
            proc.kill()
