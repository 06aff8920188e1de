"""The shipped storage-fault scenarios, run for real on the local runtime through the storage layer (FUSE): each
gives its documented verdict, and each failing one beside its correct twin (full disk: atomic vs non-atomic save;
power loss: fsync vs no fsync), so the checkers are seen to fail and not to cry wolf.

Real torchrun jobs, real ENOSPC / stalls / truncation served by the FUSE layer; skipped, saying why, where the
storage layer cannot run (no ``chaos.storage.server``, no /dev/fuse).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from chaos.history import read_history
from tests.runs import run_shipped
from tests.tiers import FULL, tiered

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

# scenario -> (verdict, the checkpoint verdicts that must fail; every other one must pass or be not-checked)
EXPECTED_VERDICT = {
    "storage/disk-full-during-save": "pass",
    "storage/disk-full-non-atomic-save": "restart_loop",
    "storage/slow-checkpoint-store": "pass",
    "storage/fsync-stall-hangs": "hung",
    "storage/lost-writes": "pass",
    "storage/lost-writes-no-fsync": "fail",
}
# The gate's storage run: a full disk during a save, in the FUSE storage layer (one run, two tests).
GATE = {"storage/disk-full-during-save"}
# the non-atomic save cut short by the full disk stays torn on disk: the next restart would load it again
FAILING = {"storage/disk-full-non-atomic-save": {"digests_ok": "loaded_corrupt",
                                                 "next_resume_intact": "next_resume_torn"},
           "storage/lost-writes-no-fsync": {"resumed_from_newest_valid": "lost_all_progress"}}


def storage_layer_missing() -> str | None:
    if importlib.util.find_spec("chaos.storage.server") is None:
        return "the storage layer's server (chaos.storage.server) is not installed in this tree"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: storage faults need the FUSE storage layer"
    return None


def run(name: str) -> tuple[dict[str, Any], Path]:
    missing = storage_layer_missing()
    if missing:
        pytest.skip(missing)
    return run_shipped(name)


def failing(result: dict[str, Any]) -> dict[str, str | None]:
    return {k: v.get("verdict") for k, v in result["checkpoint"].items() if v["ok"] is False}


@pytest.mark.parametrize("name", tiered(sorted(EXPECTED_VERDICT), GATE))
def test_documented_verdict(name: str) -> None:
    result, run_dir = run(name)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    assert failing(result) == FAILING.get(name, {}), {k: v["why"] for k, v in result["checkpoint"].items()}
    fault = result["faults"][0]
    assert fault["injected"] and fault["mechanism"], fault
    assert "storage layer" in fault["mechanism"]


def test_a_full_disk_fails_the_save_in_the_layer_and_the_job_resumes_from_the_previous_checkpoint() -> None:
    result, run_dir = run("storage/disk-full-during-save")
    history = read_history(run_dir / "events.jsonl")
    failed = [e for e in history if e.get("event") == "storage_op_failed"]
    assert failed and {e["errno"] for e in failed} == {"ENOSPC"}, failed
    assert result["faults"][0]["resumed_from"] == 100 and result["faults"][0]["lost_steps"] == 50
    assert any(e.get("event") == "fault_healed" and e.get("restored") is True for e in history)


@FULL
def test_a_slow_store_costs_goodput_not_correctness() -> None:
    result, _ = run("storage/slow-checkpoint-store")
    assert result["restarts"] == 0 and result["goodput"] is not None and result["goodput"] <= 0.6
    assert result["checkpoint"]["matches_golden"]["mode"] == "bitwise"


@FULL
def test_a_stalled_fsync_hangs_the_job_and_names_the_node() -> None:
    result, _ = run("storage/fsync-stall-hangs")
    assert result["end_reason"] == "hung" and "node0" in result["why"] and "fsync" in result["why"], result["why"]


@FULL
def test_power_loss_cuts_only_what_was_never_fsynced() -> None:
    correct, _ = run("storage/lost-writes")
    broken, _ = run("storage/lost-writes-no-fsync")
    assert correct["faults"][0]["resumed_from"] == 150
    assert broken["faults"][0]["lost_steps"] == 170
    assert "storage layer cut node0's unsynced data" in broken["faults"][0]["mechanism"]
    assert "step_00000150.pt" in broken["faults"][0]["mechanism"]
