"""``launcher: tf-multiworker`` for real: TensorFlow MultiWorkerMirroredStrategy workers started, crashed and
relaunched by the engine, on the local runtime.

Every run goes through ``chaos run`` in a subprocess: the scenario model is built from the registered launchers when
:mod:`chaos.scenario` is imported, and where the installed metadata predates the tf-multiworker entry point (an
editable install made before it was added) the subprocess gets a throwaway dist-info that registers it
(:func:`chaos_env`). Needs ``tensorflow`` and ``tf-keras`` (``pip install "torch-chaos[tf]"``): skipped without them.

The gate keeps one run (a worker crash on local: the group relaunched by node_restart, both checkpoint verdicts);
the chief crash, the planted bug and the validation refusals wait for ``--full``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.plan import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"),
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None
                                 or importlib.util.find_spec("tf_keras") is None,
                                 reason='tensorflow and tf-keras are not installed (pip install "torch-chaos[tf]")')]

SCENARIOS = REPO_ROOT / "scenarios" / "tf"
# the shipped scenarios these tests run, by name under scenarios/ (tests/test_suite_coverage.py)
EXPECTED_VERDICT = {"tf/worker-crash": "pass", "tf/chief-crash": "pass", "tf/ignore-backup": "fail",
                    "tf/partition": "pass", "tf/crash-during-save": "pass", "tf/bug-non-atomic-save": "restart_loop"}
BYO = REPO_ROOT / "examples" / "byo"
# the plain MWMS script's scenarios (examples/byo/README.md documents them)
BYO_VERDICT = {"tf-mwms-worker-crash": "pass", "tf-mwms-timestamped-backup": "fail"}
ENTRY_POINT = "tf-multiworker = chaos.launchers.tf:TfMultiWorker"


def chaos_env(tmp: Path) -> dict[str, str]:
    """The environment of a ``chaos`` subprocess that sees this checkout and the tf-multiworker launcher: a
    throwaway dist-info registers it when the installed metadata does not (the same class either way, so the
    registry takes it once)."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT)]
    if not any(ep.name == "tf-multiworker" for ep in importlib.metadata.entry_points(group="torch_chaos.launchers")):
        info = tmp / "dist" / "torch_chaos_tf_dev-0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-chaos-tf-dev\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[torch_chaos.launchers]\n{ENTRY_POINT}\n")
        paths.append(str(info.parent))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_tf(name: str, tmp: Path, runtime: str | None = None, where: Path = SCENARIOS) -> tuple[dict, Path]:
    """result.json of one run of <where>/<name>.yaml (scenarios/tf by default; on ``runtime``, else the
    scenario's), and its run directory."""
    extra = ["--runtime", runtime] if runtime else []
    out = subprocess.run([sys.executable, "-m", "chaos", "run", "--json", "--out", str(tmp / "runs"), *extra,
                          str(where / f"{name}.yaml")], env=chaos_env(tmp), capture_output=True, text=True,
                         timeout=900)
    assert out.stdout.strip(), out.stderr[-3000:]
    (run_dir,) = (tmp / "runs").iterdir()
    return json.loads(out.stdout), run_dir


def _recovered(result: dict, target: str) -> dict:
    (fault,) = result["faults"]
    assert fault["target"] == target and fault["mechanism"], fault
    assert fault["recovery_s"] is not None and fault["recovery_s"] > 0, fault  # measured, not asserted on timing
    assert fault["lost_steps"] is not None and 0 <= fault["lost_steps"] <= 20, fault  # at most the epoch redone
    return fault


def _restarted_both(result_dir: Path) -> None:
    """MWMS is not elastic: the lost worker and the survivor both exited non-zero and were relaunched."""
    events = [json.loads(line) for line in (result_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    exits = {e["node"]: e for e in events if e["event"] == "node_exited" and e.get("will_replace")}
    assert set(exits) == {"node0", "node1"}, exits
    relaunched = {e["node"] for e in events if e["event"] == "node_started" and e.get("replacement")}
    assert relaunched == {"node0", "node1"}


def test_worker_crash_relaunches_the_group(tmp_path: Path) -> None:
    result, run_dir = run_tf("worker-crash", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/worker-crash"], result["why"]
    _recovered(result, "node1")
    checks = result["checkpoint"]
    assert checks["digests_ok"]["ok"] is True and checks["resumed_from_newest_valid"]["ok"] is True, checks
    # the workers' sample ids and a golden run of the same job: the other two verdicts are checked too
    assert checks["exactly_once"]["ok"] is True, checks["exactly_once"]
    assert checks["matches_golden"]["ok"] is True, checks["matches_golden"]
    _restarted_both(run_dir)
    phases = [p["phase"] for p in result["faults"][0]["recovery_breakdown"]["phases"]]
    assert phases[0].startswith("detection (the survivors' collectives fail)"), phases


@pytest.mark.full
@pytest.mark.parametrize("runtime", ["netns", "docker"])
def test_worker_crash_on_own_addresses(tmp_path: Path, runtime: str) -> None:
    """Each node its own address, one port for all (netns: namespaces; docker: the node image with tensorflow and
    tf-keras built in on first use, 82 s and 3.19 GB measured)."""
    result, run_dir = run_tf("worker-crash", tmp_path, runtime)
    assert result["verdict"] == EXPECTED_VERDICT["tf/worker-crash"], result["why"]
    _recovered(result, "node1")
    _restarted_both(run_dir)


@pytest.mark.full
def test_chief_crash_relaunches_the_group(tmp_path: Path) -> None:
    result, run_dir = run_tf("chief-crash", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/chief-crash"], result["why"]
    _recovered(result, "node0")
    _restarted_both(run_dir)


@pytest.mark.full
def test_ignored_backup_fails_as_lost_progress(tmp_path: Path) -> None:
    result, _ = run_tf("ignore-backup", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/ignore-backup"], result["why"]
    resumed = result["checkpoint"]["resumed_from_newest_valid"]
    assert resumed["ok"] is False and resumed["verdict"] == "lost_all_progress", resumed


def _write_progress_fault(result: dict, run_dir: Path) -> dict:
    """The one fault, fired on the storage layer's write progress: the layer watched this shipped workload (its probe
    never reports write progress) and the crash landed while a save was being written."""
    (fault,) = result["faults"]
    assert fault["injected"] is True and fault["mechanism"], fault
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    (started,) = [e for e in events if e["event"] == "run_started"]
    assert started["environment"]["storage_layer"] == "fuse", started["environment"]
    progress = [e for e in events if e["event"] == "checkpoint_write_progress"]
    assert progress and {e["source"] for e in progress} == {"storage"}, progress[:3]
    return fault


@pytest.mark.full
def test_crash_during_save_resumes_from_the_previous_whole_backup(tmp_path: Path) -> None:
    """TF writes a checkpoint under a temporary name and renames it into place: a crash halfway through a backup's
    write leaves the previous backup the newest, and the relaunched group resumes from it."""
    result, run_dir = run_tf("crash-during-save", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/crash-during-save"], result["why"]
    _write_progress_fault(result, run_dir)
    checks = result["checkpoint"]
    for name in ("digests_ok", "resumed_from_newest_valid", "exactly_once", "matches_golden"):
        assert checks[name]["ok"] is True, (name, checks[name])
    _restarted_both(run_dir)


@pytest.mark.full
def test_non_atomic_save_is_caught_as_a_torn_load(tmp_path: Path) -> None:
    """The planted in-place save: the crash mid-write tears weights.h5, every relaunch loads it and dies."""
    result, run_dir = run_tf("bug-non-atomic-save", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/bug-non-atomic-save"], result["why"]
    _write_progress_fault(result, run_dir)
    checks = result["checkpoint"]
    digests = checks["digests_ok"]
    assert digests["ok"] is False and digests["verdict"] == "loaded_corrupt", digests
    assert "weights.h5" in digests["why"] and "never finished" in digests["why"], digests
    torn = checks["next_resume_intact"]
    assert torn["ok"] is False and torn["verdict"] == "next_resume_torn" and "weights.h5" in torn["why"], torn
    # the torn file is the cause, nothing else: every relaunch resumed from the file the job trusts, no sample lost
    failed = {name for name, verdict in checks.items() if verdict.get("ok") is False}
    assert failed == {"digests_ok", "next_resume_intact"}, {name: checks[name]["why"] for name in failed}
    assert "weights.h5" in result["why"], result["why"]


@pytest.mark.full
@pytest.mark.parametrize("fault,words", [
    ("{kind: kill_worker, target: 1, at_step: 10}", "kill_worker does not apply to the tf-multiworker launcher"),
    ("{kind: hang, target: 1, at_step: 10}", "hang does not apply to the tf-multiworker launcher"),
    ("{kind: crash, target: store, at_step: 10}", "faults[0].target"),
])
def test_refused_faults_are_refused_with_the_reason(tmp_path: Path, fault: str, words: str) -> None:
    text = (SCENARIOS / "worker-crash.yaml").read_text().replace("{kind: crash, target: 1, at_step: 110}", fault)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "chaos", "validate", str(path)], env=chaos_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert words in out.stdout + out.stderr and "Traceback" not in out.stderr


@pytest.mark.full
def test_partition_fails_both_collectives_and_the_group_resumes_after_the_heal(tmp_path: Path) -> None:
    result, run_dir = run_tf("partition", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["tf/partition"], result["why"]
    _restarted_both(run_dir)


@pytest.mark.full
@pytest.mark.parametrize("name", list(BYO_VERDICT))
def test_the_plain_mwms_script_and_its_resume_bug(tmp_path: Path, name: str) -> None:
    """A TF script that never imports chaos: steps from its printed lines, the backup from the storage layer."""
    result, _ = run_tf(name, tmp_path, where=BYO)
    assert result["verdict"] == BYO_VERDICT[name], result["why"]
    resumed = result["checkpoint"]["resumed_from_newest_valid"]
    if BYO_VERDICT[name] == "fail":
        assert resumed["ok"] is False and resumed["verdict"] == "lost_all_progress", resumed
