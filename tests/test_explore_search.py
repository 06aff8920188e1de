"""`chaos explore`'s search and shrinking, on a model of the planted non-atomic-save bug instead of real runs.

The model is what the real runs show (tests/integration/test_explore.py; seed 1 with budget 6 gave the same 20
plans and verdicts for real): a plan fails exactly when a crash lands on a checkpoint write. With it the search,
hypothesis's shrinking and the fault-dropping pass are checked in a second, including a first failing plan of
three faults, which the real-run test (a cheaper seed) does not reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chaos.explore
from chaos.explore import explore
from chaos.loading import load_scenario, shipped_scenarios_dir
from chaos.scenario import Scenario

SCENARIO = shipped_scenarios_dir() / "bugs" / "explore-non-atomic-save.yaml"


def tears_a_checkpoint(scenario: Scenario) -> bool:
    return any(f.kind == "crash" and f.on is not None and f.on.event == "checkpoint_write_progress"
               for f in scenario.faults)


class _Result(dict[str, Any]):
    run_dir = Path("/nonexistent")


class ModelEngine:
    """Stands in for chaos.engine.Engine: the verdict the bug gives a plan, without running it."""

    def __init__(self, scenario: Scenario, out_dir: Any = "runs", **_: Any) -> None:
        self.scenario = scenario

    def run(self) -> _Result:
        failed = tears_a_checkpoint(self.scenario)
        return _Result(verdict="restart_loop" if failed else "pass", why="model")


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos.explore, "Engine", ModelEngine)


@pytest.mark.usefixtures("model")
def test_a_three_fault_failure_shrinks_to_one_crash_in_a_write(tmp_path: Path) -> None:
    summary = explore(load_scenario(SCENARIO), out_dir=tmp_path, budget=6, seed=1)
    assert summary["found"]
    first = next(t for t in summary["tried"] if t["failed"])
    assert len(first["faults"]) == 3, "this seed's first failing plan has redundant faults to drop"
    [fault] = summary["minimal_faults"]
    assert fault["kind"] == "crash" and fault["on"]["event"] == "checkpoint_write_progress"
    assert summary["plans_tried"] <= 6 + 2 * 6 + 2 * 3
    assert all(t["failed"] == any(f.get("on", {}).get("event") == "checkpoint_write_progress"
                                  for f in t["faults"]) for t in summary["tried"])
    assert Path(summary["reproducer"]).exists()


@pytest.mark.usefixtures("model")
def test_the_real_run_tests_seed_finds_and_shrinks(tmp_path: Path) -> None:
    """The seed the integration test runs for real: found, and hypothesis shrinks at least one failing plan."""
    summary = explore(load_scenario(SCENARIO), out_dir=tmp_path, budget=6, seed=17)
    assert summary["found"] and summary["failures"] >= 2
    [fault] = summary["minimal_faults"]
    assert fault["on"]["event"] == "checkpoint_write_progress"


@pytest.mark.usefixtures("model")
def test_nothing_found_when_no_plan_tears_a_write(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    assert scenario.explore is not None
    scenario.explore.events = ["checkpoint_save_started"]
    summary = explore(scenario, out_dir=tmp_path, budget=5, seed=1)
    assert not summary["found"] and 1 <= summary["plans_tried"] <= 5
