"""A fault kind and a runtime from outside the package: examples/torch-chaos-wipe-checkpoints and
examples/torch-chaos-subprocess-runtime, installed as their own distributions (into a private directory, not the
test environment) and used by scenarios in real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import FULL

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch-chaos-wipe-checkpoints"
RUNTIME_EXAMPLE = EXAMPLE.parent / "torch-chaos-subprocess-runtime"

# The whole file waits for --full: the registry's plug-in tests run in the fast tier.
pytestmark = [pytest.mark.integration, FULL]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(EXAMPLE), str(RUNTIME_EXAMPLE)], check=True, timeout=300)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}


def chaos(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_outside_fault_kind_is_validated_and_run(plugin_env: dict[str, str], tmp_path: Path,
                                                 no_leftovers: None) -> None:
    schema = chaos(["schema"], plugin_env, tmp_path)
    assert "WipeCheckpointsOptions" in schema.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nworkload: {name: ddp-mlp}\nfaults:\n  - {kind: wipe_checkpoints, at_step: 3, "
                   "keep_newest: -1}\n")
    refused = chaos(["validate", "--no-machine", str(bad)], plugin_env, tmp_path)
    assert refused.returncode == 2 and "faults[0].keep_newest" in refused.stderr, refused.stderr

    ran = chaos(["run", str(EXAMPLE / "wipe-then-crash.yaml"), "--json", "--out", str(tmp_path / "runs")],
                plugin_env, tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    wipe, crash = result["faults"]
    assert wipe["kind"] == "wipe_checkpoints" and wipe["mechanism"].startswith("deleted ")
    events = [json.loads(line) for line in
              (tmp_path / "runs" / result["run_id"] / "events.jsonl").read_text().splitlines()]
    injected = next(e for e in events if e["event"] == "fault_injected" and e["fault_id"] == 0)
    assert injected["details"]["paths"], "the wipe found checkpoints to delete"
    # Nothing survived the wipe, so the crash cost every step done so far: the job restarted from step 0 ...
    assert crash["kind"] == "crash" and crash["lost_steps"] == 60
    # ... and that is what a correct job does with an empty volume: no false alarm from the checkpoint checker.
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is True, result["checkpoint"]
    assert result["verdict"] == "pass"


def test_outside_runtime_runs_a_node_crash_and_refuses_what_it_cannot_do(plugin_env: dict[str, str],
                                                                        tmp_path: Path,
                                                                        no_leftovers: None) -> None:
    listed = json.loads(chaos(["plugins", "--json"], plugin_env, tmp_path).stdout)
    mine = next(p for p in listed["plugins"] if p["name"] == "subprocess")
    assert mine["group"] == "runtime" and set(mine["capabilities"]) == {"kill", "checkpoint_storage"}
    frozen = tmp_path / "freeze.yaml"
    frozen.write_text("name: f\ncluster: {runtime: subprocess, nodes: 2}\nworkload: {name: ddp-mlp}\nfaults:\n"
                      "  - {kind: freeze, target: 1, at_step: 3, duration: 2s}\n")
    refused = chaos(["validate", "--no-machine", str(frozen)], plugin_env, tmp_path)
    assert refused.returncode == 2 and "freeze" in refused.stderr and "local" in refused.stderr, refused.stderr

    ran = chaos(["run", str(RUNTIME_EXAMPLE / "node-crash.yaml"), "--json", "--out", str(tmp_path / "runs")],
                plugin_env, tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    assert result["environment"]["runtime"] == "subprocess" and result["verdict"] == "pass", result["why"]
    crash = result["faults"][0]
    # the whole tree went (agent and workers): the node was replaced and resumed from its checkpoint
    assert crash["mechanism"].startswith("SIGKILL to the node's") and crash["restarted"], crash
    assert crash["resumed_from"] == 150, crash
    # no verdict failed, and the ones a node crash with a resume proves are ok (the others may be not checked with
    # a reason: replay_consistent when no step was trained twice)
    assert not any(v["ok"] is False for v in result["checkpoint"].values()), result["checkpoint"]
    assert all(result["checkpoint"][k]["ok"] is True for k in ("digests_ok", "resumed_from_newest_valid",
                                                                  "one_writer_per_file", "next_resume_intact"))
