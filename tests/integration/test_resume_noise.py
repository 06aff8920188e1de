"""A stock DDP script (no fixed-layout gradient hook: its resume is not bitwise) passes a node crash within the measured
noise of a clean resume, and the same script with a planted resume bug fails, many times beyond that noise."""

from __future__ import annotations

import json

import pytest

from chaos.analysis.noise import BAND_CEILING
from tests.noise_scenarios import CRASH_AT, SAVE_EVERY, plain_ddp
from tests.runs import run_scenario
from tests.tiers import FULL

# The whole file waits for --full: the gate's bring-your-own run is test_bring_your_own.py's.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]


def test_a_correct_stock_ddp_resume_is_within_the_measured_noise() -> None:
    result, run_dir = run_scenario(plain_ddp())
    golden = result["checkpoint"]["matches_golden"]
    assert result["verdict"] == "pass", (result["why"], golden, run_dir)
    assert golden["mode"] == "within_noise", golden
    assert 0 < golden["max_rel_loss_diff"] <= golden["band_rel"] <= BAND_CEILING, golden
    resumed = CRASH_AT // SAVE_EVERY * SAVE_EVERY
    assert golden["faulted_resumed_from"] == golden["control_resumed_from"] == resumed, golden
    control = json.loads((run_dir / "control.json").read_text())
    assert control["trusted"] and control["resume_step"] == resumed, control
    assert result["control_run"] == control["run_dir"]


def test_a_planted_resume_bug_fails_far_beyond_the_noise() -> None:
    result, run_dir = run_scenario(plain_ddp("no-optimizer-state"))
    golden = result["checkpoint"]["matches_golden"]
    assert result["verdict"] == "fail" and golden["mode"] == "diverged", (golden, run_dir)
    assert golden["max_rel_loss_diff"] > 10 * BAND_CEILING, golden
    assert CRASH_AT // SAVE_EVERY * SAVE_EVERY < golden["first_divergent_step"] <= CRASH_AT + 5, golden
    assert not (run_dir / "control.json").exists()  # beyond any band: no control run was needed
