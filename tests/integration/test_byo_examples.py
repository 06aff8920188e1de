"""Scripts torch-chaos did not write (examples/byo/per_step_ddp.py: plain DDP, Adam, dropout, no ``import chaos``),
judged from their output and their checkpoint files alone: the correct one passes a node crash with no false
alarm, and each planted bug fails with its real cause, not a generic divergence.

Real runs of 300 tiny steps (~40-75 s each on 2 shared cores); those that judge checkpoint files only run without
a golden run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.loading import parse_scenario
from chaos.scenario import Scenario
from tests.byo_scenarios import byo_text
from tests.runs import run_scenario
from tests.tiers import FULL

# The whole file waits for --full: the gate's bring-your-own run is test_bring_your_own.py's.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]


# A verdict of restart_loop comes after this many failed restarts (limits.restart_loop_restarts, 4 by default):
# what these tests check (the torn file named, the workers' own error) is there from the first one; ~15 s a run.
LOOP_AFTER = 2


def byo(name: str, golden: bool = True) -> Scenario:
    """An examples/byo scenario as shipped (script path made absolute); ``golden=False`` skips the golden run
    where the verdict under test is judged from checkpoint files only."""
    text = byo_text(name) + ("" if golden else "checks: {golden: false}\n")
    return parse_scenario(text, f"{name}.yaml")


def looping(scenario: Scenario) -> Scenario:
    scenario.limits.restart_loop_restarts = LOOP_AFTER
    return scenario


def verdicts(result: dict[str, Any], run_dir: Path) -> str:
    return f"{result['verdict']}: {result['why']}\n{result['checkpoint']}\n{run_dir}"


def test_correct_per_step_script_passes_a_node_crash() -> None:
    """On 3 ranks, where stock DDP's resume really changes the losses' last bits (measured 3.3e-07 relative; on 2
    ranks a two-term sum commutes and the run is bitwise, which would prove nothing about false alarms)."""
    result, run_dir = run_scenario(byo("per-step-node-crash-3-nodes"))
    ck = result["checkpoint"]
    assert result["verdict"] == "pass", verdicts(result, run_dir)
    [fault] = result["faults"]
    assert fault["restarted"] and fault["resumed_from"] == 150, fault
    # every verdict was really checked: the load was seen, the resume judged, the losses compared
    assert ck["digests_ok"]["ok"] is True and "ckpt_150.pt" in str(ck["digests_ok"]), ck["digests_ok"]
    assert ck["resumed_from_newest_valid"]["ok"] is True, ck["resumed_from_newest_valid"]
    golden = ck["matches_golden"]  # its why says how a golden or control run that did not complete ended, and where
    assert golden["ok"] is True and golden["mode"] in ("within_noise", "equal_as_printed"), golden["why"]


def test_stale_by_name_is_told_which_checkpoint_it_should_have_loaded() -> None:
    result, run_dir = run_scenario(byo("per-step-stale-by-name", golden=False))
    newest = result["checkpoint"]["resumed_from_newest_valid"]
    assert result["verdict"] == "fail" and newest["ok"] is False, verdicts(result, run_dir)
    assert "ckpt_50.pt (step 50)" in newest["why"] and "ckpt_150.pt (step 150)" in newest["why"], newest


def test_non_atomic_save_torn_by_a_crash_is_named() -> None:
    """A crash once 1 MiB of ckpt_150.pt is written: every restart dies loading it. The verdict names the file,
    why it is bad and what the workers printed, instead of a hang or a generic divergence."""
    result, run_dir = run_scenario(looping(byo("per-step-non-atomic", golden=False)))
    assert result["verdict"] == "restart_loop", verdicts(result, run_dir)
    assert "failed finding central directory" in result["why"], result["why"]
    assert "ckpt_150.pt (step 150): its save never finished" in result["why"], result["why"]
    digests = result["checkpoint"]["digests_ok"]
    assert digests["ok"] is False and "ckpt_150.pt" in digests["why"], digests


def test_non_atomic_save_emptied_by_a_crash_at_save_start_is_named() -> None:
    """The crash lands as the save begins (held at its first write): ckpt_150.pt is left empty. Reads of an empty
    file never reach the storage layer, so the load must be recorded at its close; before that it went unseen and
    digests_ok said 'ok: no checkpoint was loaded'."""
    text = byo_text("per-step-non-atomic").replace("checkpoint_write_progress", "checkpoint_save_started")
    result, run_dir = run_scenario(looping(parse_scenario(text + "checks: {golden: false}\n",
                                                         "non-atomic-at-start.yaml")))
    assert result["verdict"] == "restart_loop", verdicts(result, run_dir)
    assert "ckpt_150.pt (step 150): its save never finished" in result["why"], result["why"]
    digests = result["checkpoint"]["digests_ok"]
    assert digests["ok"] is False and "ckpt_150.pt" in digests["why"], digests


def test_missing_optimizer_state_diverges_far_above_the_noise_floor() -> None:
    result, run_dir = run_scenario(byo("per-step-no-optimizer-state"))
    golden = result["checkpoint"]["matches_golden"]
    assert result["verdict"] == "fail" and golden["ok"] is False, verdicts(result, run_dir)
    # the loss printed at step N is computed before step N's update: 151 still matches, 152 is the first that
    # feels Adam's lost moments (measured: relative difference 0.0948 there)
    assert golden["mode"] == "diverged" and golden["first_divergent_step"] == 152, golden
    # far beyond any noise band: the widest band torch-chaos ever allows is band_ceiling_rel (measured: ~1000x it)
    assert golden["max_rel_loss_diff"] > 100 * golden["band_ceiling_rel"], golden


def test_a_correct_sharded_save_cut_short_by_a_crash_passes() -> None:
    """torch.distributed.checkpoint (examples/byo/dcp_sharded_ddp.py): the node writing a shard of it_000120 dies
    as the shard is created; the job resumes from it_000080 through its ``latest`` marker. One shard of it_000120
    may have finished: that is not a whole save, so no false resumed_from_stale (found by a new user), and the
    step is 80 from the directory's name, not 0 from the shard's."""
    result, run_dir = run_scenario(byo("dcp-crash-during-save"))
    assert result["verdict"] == "pass", verdicts(result, run_dir)
    [fault] = result["faults"]
    assert fault["restarted"] and fault["resumed_from"] == 80, fault
    ck = result["checkpoint"]
    assert ck["resumed_from_newest_valid"]["ok"] is True and ck["digests_ok"]["ok"] is True, ck
    assert ck["matches_golden"]["ok"] is True, ck["matches_golden"]


def test_a_marker_written_before_its_sharded_save_is_a_restart_loop_naming_the_missing_file() -> None:
    result, run_dir = run_scenario(looping(byo("dcp-marker-first", golden=False)))
    assert result["verdict"] == "restart_loop", verdicts(result, run_dir)
    assert "it_000120/.metadata" in result["why"], result["why"]
    # each restart loaded the marker and died before a step: what it resumed from is not judged, never "ok"
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is None, result["checkpoint"]


def test_every_rank_saving_to_one_file_is_named_concurrent_writers() -> None:
    """Every rank saves its own RNG state to the same ckpt_N.pt (each through its own temporary file): the storage
    layer sees two completed saves of one file milliseconds apart with different bytes, named as concurrent
    writers from the saves alone (no golden run: the loss is not what shows it)."""
    result, run_dir = run_scenario(byo("per-step-every-rank-saves", golden=False))
    clash = result["checkpoint"]["one_writer_per_file"]
    assert result["verdict"] == "fail" and clash["ok"] is False, verdicts(result, run_dir)
    assert clash["verdict"] == "concurrent_writers" and "node0" in clash["why"] and "node1" in clash["why"], clash
    assert result["checkpoint"]["digests_ok"]["ok"] is True  # each load matched a completed save: not torn


def test_the_correct_script_has_one_writer_per_file() -> None:
    """The same crash with the correct script (rank 0 saves): each file one writer, no false alarm."""
    result, run_dir = run_scenario(byo("per-step-node-crash", golden=False))
    assert result["verdict"] == "pass", verdicts(result, run_dir)
    assert result["checkpoint"]["one_writer_per_file"]["ok"] is True, result["checkpoint"]["one_writer_per_file"]
