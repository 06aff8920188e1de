"""`chaos explore` on the planted non-atomic-save bug finds a failing plan within its budget and shrinks it to
one crash inside a checkpoint write; the reproducer fails again when replayed; the correct workload survives
the same exploration.

Seed 17 finds the bug on a one-fault plan that hypothesis shrinks further (8 real runs, 2 of them restart loops,
about 2 min); seed 1 took 20 runs (6 min) for the same conclusion. Shrinking a three-fault plan is checked on a
model of the bug in tests/test_explore_search.py, which also proves the model agrees with these real runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.engine import run
from chaos.explore import explore
from chaos.loading import load_scenario, shipped_scenarios_dir
from tests.runs import runs_root
from tests.tiers import FULL

# The whole file waits for --full: explore's search is tested on a model in the fast tier.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

SCENARIO = shipped_scenarios_dir() / "bugs" / "explore-non-atomic-save.yaml"


def test_explore_finds_and_shrinks_the_non_atomic_save_bug() -> None:
    summary = explore(load_scenario(SCENARIO), out_dir=runs_root(), budget=6, seed=17)
    assert summary["found"], summary["tried"]
    [fault] = summary["minimal_faults"]
    assert fault["kind"] == "crash"
    assert fault["on"]["event"] == "checkpoint_write_progress", summary["minimal_plan"]
    assert summary["plans_tried"] <= 6 + 2 * 6 + 2 * 3
    assert summary["failures"] >= 2, "a failing plan was shrunk by a real run"
    replay = run(summary["reproducer"], out_dir=Path(summary["reproducer"]).parent / "replay")
    assert replay.verdict != "pass"
    assert replay.checkpoint["digests_ok"]["verdict"] == "loaded_corrupt"


def test_explore_finds_nothing_on_the_correct_workload() -> None:
    scenario = load_scenario(SCENARIO)
    scenario.workload.args.pop("bug")  # type: ignore[union-attr]
    scenario.name = "explore-correct-save"
    # two real plans: the search itself is tested on a model of the job (tests/test_explore_search.py); here, that
    # real runs of a correct job raise no false alarm (~20 s less than four)
    summary = explore(scenario, out_dir=runs_root(), budget=2, seed=1)
    assert not summary["found"], [t for t in summary["tried"] if t["failed"]]
    assert 1 <= summary["plans_tried"] <= 2
