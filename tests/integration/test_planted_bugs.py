"""Each planted checkpointing bug is caught by its scenario with exactly the expected verdicts, and the same
scenario with the correct workload passes every verdict: the checkers can fail, and do not cry wolf."""

from __future__ import annotations

import pytest

from chaos.loading import load_scenario, shipped_scenarios_dir
from tests.runs import SHORT_STEPS, run_once, run_scenario, run_shipped, shipped
from tests.tiers import FULL, tiered

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

# bug -> (run verdict, the checkpoint verdicts that must fail; every other one must pass or be not-checked)
# Since schema 14 a bug that changes what a resumed step computes also fails replay_consistent (the re-trained steps
# differ from their first run), and a save torn in place leaves the newest checkpoint torn (next_resume_intact).
EXPECTED = {
    "non-atomic-save": ("restart_loop", {"digests_ok", "next_resume_intact"}),
    "no-optimizer-state": ("fail", {"matches_golden", "replay_consistent"}),
    # a skipped batch necessarily changes the model too
    "off-by-one-resume": ("fail", {"exactly_once", "matches_golden", "replay_consistent"}),
    "stale-checkpoint": ("fail", {"resumed_from_newest_valid"}),
    # training on from damaged weights necessarily changes the model too
    "no-digest-check": ("fail", {"digests_ok", "matches_golden", "replay_consistent"}),
    "reshuffle-on-resume": ("fail", {"exactly_once", "matches_golden", "replay_consistent"}),
}
PROBLEM = {"non-atomic-save": "loaded_corrupt", "no-digest-check": "loaded_corrupt",
           "stale-checkpoint": "resumed_from_stale"}
# The gate's planted bug: a stale resume (its checker must fail it), and the same job without the bug (must pass).
GATE = {"stale-checkpoint"}


def failing(result: dict) -> set[str]:
    return {name for name, v in result["checkpoint"].items() if v["ok"] is False}


@pytest.mark.parametrize("bug", tiered(sorted(EXPECTED), GATE))
def test_planted_bug_is_caught(bug: str) -> None:
    result, run_dir = run_shipped(f"bugs/{bug}")
    verdict, expected_failures = EXPECTED[bug]
    assert result["verdict"] == verdict, (result["why"], run_dir)
    assert failing(result) == expected_failures, {k: v["why"] for k, v in result["checkpoint"].items()}
    if bug in PROBLEM:
        name = "digests_ok" if PROBLEM[bug] == "loaded_corrupt" else "resumed_from_newest_valid"
        assert result["checkpoint"][name]["verdict"] == PROBLEM[bug]
    if "matches_golden" in expected_failures:
        assert result["checkpoint"]["matches_golden"]["mode"] == "diverged"
    if "exactly_once" in expected_failures:
        v = result["checkpoint"]["exactly_once"]
        assert sum(v["skipped"].values()) > 0


@pytest.mark.parametrize("bug", tiered(sorted(EXPECTED), GATE))
def test_same_scenario_with_the_correct_workload_passes(bug: str) -> None:
    """Without its bug, four of the six scenarios are the same job (one crash at step 170): it runs once."""
    scenario = load_scenario(shipped_scenarios_dir() / "bugs" / f"{bug}.yaml")
    workload = scenario.workload
    workload.args = {k: v for k, v in workload.args.items() if k != "bug"}  # type: ignore[union-attr]
    scenario.name = f"correct-{bug}"
    result, run_dir = run_once(scenario)
    assert result["verdict"] == "pass", (result["why"], run_dir)
    assert not failing(result)
    assert result["checkpoint"]["matches_golden"]["mode"] == "bitwise"
    assert result["checkpoint"]["exactly_once"]["ok"] is True
    assert result["faults"] and all(f["mechanism"] for f in result["faults"])


@FULL
@pytest.mark.slow
@pytest.mark.flaky(reruns=0)  # a false alarm one run in three must fail here, not pass on a rerun
def test_repeated_quickstart_raises_no_false_alarm() -> None:
    """Three real runs of quickstart: a checker that cries wolf on one run in three shows here. The first is the
    session's shared quickstart run (test_shipped_scenarios.py's, same worker: conftest.SHARES_RUNS_WITH), the other
    two are run here."""
    scenario = shipped("quickstart", steps=SHORT_STEPS)
    for i in range(3):
        scenario.name = f"quickstart-repeat-{i}"
        result, run_dir = run_shipped("quickstart") if i == 0 else run_scenario(scenario)
        assert result["verdict"] == "pass", (i, result["why"], run_dir)
        assert all(v["ok"] is True for v in result["checkpoint"].values()), (i, result["checkpoint"])
