"""``launcher: flower`` for real: a Flower server and its clients started, crashed, frozen and partitioned by the
engine.

Every run goes through ``chaos run`` in a subprocess (the scenario model is built from the registered launchers at
import); where the installed metadata predates the flower entry point, the subprocess gets a throwaway dist-info
that registers it (:func:`chaos_env`). Needs ``flwr`` (``pip install "torch-chaos[flower]"``): skipped without it.

The gate keeps one run (a client crash on local: FedAvg drops the client, every round completes, the time to the
next completed round measured); the straggler, the partition, the server crash (fails: the single point of
failure), the supervised server restart, the planted bug and docker wait for ``--full``.
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
              pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                                 reason='flwr is not installed (pip install "torch-chaos[flower]")')]

SCENARIOS = REPO_ROOT / "scenarios" / "federated"
# the shipped scenarios these tests run, by name under scenarios/ (tests/test_suite_coverage.py)
EXPECTED_VERDICT = {"federated/client-crash": "pass", "federated/client-straggler": "pass",
                    "federated/partition": "pass", "federated/server-crash": "fail",
                    "federated/server-restart": "pass", "federated/bug-ignore-saved-model": "fail"}
ENTRY_POINT = "flower = chaos.launchers.flower:Flower"


def chaos_env(tmp: Path) -> dict[str, str]:
    """The environment of a ``chaos`` subprocess that sees this checkout and the flower launcher."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT)]
    if not any(ep.name == "flower" for ep in importlib.metadata.entry_points(group="torch_chaos.launchers")):
        info = tmp / "dist" / "torch_chaos_flower_dev-0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-chaos-flower-dev\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[torch_chaos.launchers]\n{ENTRY_POINT}\n")
        paths.append(str(info.parent))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_flower(name: str, tmp: Path, runtime: str | None = None) -> dict:
    """result.json of one run of scenarios/federated/<name>.yaml (on ``runtime``, else the scenario's)."""
    extra = ["--runtime", runtime] if runtime else []
    out = subprocess.run([sys.executable, "-m", "chaos", "run", "--json", "--out", str(tmp / "runs"), *extra,
                          str(SCENARIOS / f"{name}.yaml")], env=chaos_env(tmp), capture_output=True, text=True,
                         timeout=900)
    assert out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout)


def _dropped_client(result: dict, target: str) -> dict:
    """Every round completed; the fault has a next completed round, measured."""
    fed = result["federated"]
    assert fed["rounds_failed"] == 0 and fed["rounds_completed"] == fed["rounds_planned"], fed
    (fault,) = fed["faults"]
    assert fault["target"] == target and fault["next_completed_round"] is not None, fault
    assert fault["to_next_round_s"] > 0, fault  # measured, not asserted on timing
    assert all(r["results"] >= 1 for r in fed["rounds"])
    return fed


def test_client_crash_is_dropped(tmp_path: Path) -> None:
    result = run_flower("client-crash", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/client-crash"], result["why"]
    fed = _dropped_client(result, "node1")
    after = [r for r in fed["rounds"] if r["round"] > fed["faults"][0]["round_before"] + 1]
    assert all("node1" not in r["sampled"] for r in after), after  # a dead client is never sampled again
    assert fed["quality"]["final"]["eval_accuracy"] is not None


@pytest.mark.full
def test_client_crash_on_docker(tmp_path: Path) -> None:
    """The node image plus flwr (built on first use, chaos.image.build_image_with)."""
    result = run_flower("client-crash", tmp_path, "docker")
    assert result["verdict"] == EXPECTED_VERDICT["federated/client-crash"], result["why"]
    _dropped_client(result, "node1")


@pytest.mark.full
def test_straggler_rounds_count_it_as_a_failure(tmp_path: Path) -> None:
    result = run_flower("client-straggler", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/client-straggler"], result["why"]
    _dropped_client(result, "node2")


@pytest.mark.full
def test_partitioned_client(tmp_path: Path) -> None:
    result = run_flower("partition", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/partition"], result["why"]
    assert result["federated"]["rounds_failed"] == 0


@pytest.mark.full
def test_server_crash_ends_training_and_says_why(tmp_path: Path) -> None:
    result = run_flower("server-crash", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/server-crash"], result["why"]
    assert "single point of failure" in result["why"] and "node0" in result["why"], result["why"]
    fed = result["federated"]
    assert fed["rounds_lost_to_server_crash"] == fed["rounds_planned"] - fed["last_round"] > 0, fed


@pytest.mark.full
def test_supervised_server_restart_resumes(tmp_path: Path) -> None:
    result = run_flower("server-restart", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/server-restart"], result["why"]
    assert result["federated"]["rounds_redone"] == 0 and result["federated"]["rounds_lost_to_server_crash"] == 0


@pytest.mark.full
def test_server_ignoring_its_saved_model_fails_for_it(tmp_path: Path) -> None:
    result = run_flower("bug-ignore-saved-model", tmp_path)
    assert result["verdict"] == EXPECTED_VERDICT["federated/bug-ignore-saved-model"], result["why"]
    failed = {x["name"] for x in result["expectations"] if not x["ok"]}
    assert "federated.rounds_redone" in failed, result["expectations"]
    assert result["federated"]["rounds_redone"] > 0
