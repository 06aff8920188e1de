"""Generated fault plans stay inside the bounds a scenario declares, and reproducers are valid scenarios."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.explore import fault_strategy, plan_text, reproducer_yaml
from chaos.loading import load_scenario, parse_scenario, shipped_scenarios_dir
from chaos.scenario import Explore, Fault

BOUNDS = Explore(kinds=["crash", "freeze", "corrupt_checkpoint"], targets=[0, 2, "event_node"], max_faults=3,
                 step_window=(10, 90), events=["checkpoint_write_progress"], occurrences=(1, 4), durations=(1, 3))


@settings(max_examples=200, deadline=None)
@given(fault_strategy(BOUNDS, nodes=3))
def test_plans_respect_the_bounds(plan: list[Fault]) -> None:
    assert 1 <= len(plan) <= 3
    for f in plan:
        assert f.kind in BOUNDS.kinds
        if f.at_step is not None:
            assert 10 <= f.at_step <= 90
        else:
            assert f.on is not None and f.on.event == "checkpoint_write_progress" and 1 <= f.on.occurrence <= 4
        if f.kind == "corrupt_checkpoint":
            assert f.target is None
        else:
            assert f.target in (0, 2, "event_node")
            assert f.target != "event_node" or f.on is not None
        if f.kind == "freeze":
            assert f.duration is not None and 1 <= f.duration <= 3


@settings(deadline=None)  # a loaded CI machine takes longer than hypothesis's 200 ms default to validate
@given(st.data())
def test_reproducer_is_a_valid_scenario_that_replays_the_plan(data: st.DataObject) -> None:
    scenario = load_scenario(shipped_scenarios_dir() / "bugs" / "explore-non-atomic-save.yaml")
    assert scenario.explore is not None
    plan = data.draw(fault_strategy(scenario.explore, scenario.cluster.nodes))
    repro = parse_scenario(reproducer_yaml(scenario, plan, seed=7))
    assert repro.faults == plan and repro.explore is None
    assert plan_text(plan) in repro.description
