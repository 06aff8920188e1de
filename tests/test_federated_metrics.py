"""The federated figures (chaos.analysis.federated) on synthetic histories shaped like flower-mlp's: rounds
completed and failed, results and failures per round, time from a fault to the next completed round, rounds a server
crash cost (ended, or redone by a server that did not resume), the quality row against the golden run, and the
``expect.federated`` bounds and verdict why that read them. No Flower, no processes: fast."""

from __future__ import annotations

from typing import Any

from chaos.analysis.federated import expectation_values, federated_metrics, server_ended_training, text_lines
from chaos.analysis.load import History
from chaos.analysis.result_json import evaluate_federated_expectations
from chaos.analysis.steps import StepTable
from chaos.loading import parse_scenario

ENV = {"launcher": "flower", "mode": "federated", "single_point_node": "node0",
       "single_point_of_failure": "node0 (the Flower server)"}


def _round(t: float, rnd: int, results: int, failures: int, sampled: list[str], failed: list[str] | None = None,
           loss: float = 0.5, acc: float = 0.8, pid: int = 100) -> dict[str, Any]:
    return {"t": t, "source": "workload", "event": "fl_round", "node": "node0", "pid": pid, "rank": 0,
            "round": rnd, "results": results, "failures": failures, "sampled": sampled,
            "result_nodes": [n for n in sampled if n not in (failed or [])], "failure_nodes": failed or [],
            "aggregated": results > 0, "eval_loss": loss, "eval_accuracy": acc}


def _history(rounds: list[dict[str, Any]], faults: list[tuple[float, str]], reason: str = "completed",
             finished: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"t": 0.0, "source": "engine", "event": "run_started", "run_id": "r",
                                     "scenario": "s", "environment": ENV, "plan": {}, "golden": None}]
    events += rounds
    for i, (t, target) in enumerate(faults):
        events.append({"t": t, "source": "engine", "event": "fault_injected", "fault_id": i, "kind": "crash",
                       "target": target, "mechanism": "SIGKILL", "details": {}, "trigger_event": None,
                       "max_step": 0})
    if finished:
        events.append({"t": 99.0, "source": "workload", "event": "run_finished", "node": "node0", "pid": 100,
                       **finished})
    events.append({"t": 100.0, "source": "engine", "event": "run_ended", "reason": reason, "why": reason,
                   "max_step": 0})
    return sorted(events, key=lambda e: e["t"])


def test_client_crash_round_failure_and_time_to_next_round() -> None:
    rounds = [_round(10, 1, 2, 0, ["node1", "node2"]), _round(11, 2, 2, 0, ["node2", "node3"]),
              _round(12, 3, 2, 0, ["node1", "node3"]),
              _round(14.5, 4, 1, 1, ["node1", "node2"], failed=["node1"]),
              _round(15.5, 5, 2, 0, ["node2", "node3"], loss=0.3, acc=0.9)]
    fed = federated_metrics(_history(rounds, [(12.5, "node1")],
                                     finished={"step": 5, "eval_loss": 0.3, "eval_accuracy": 0.9}),
                            planned_rounds=5)
    assert fed is not None
    assert (fed["rounds_completed"], fed["rounds_failed"], fed["client_failures"]) == (5, 0, 1)
    assert fed["rounds_with_failures"] == 1 and fed["rounds_redone"] == 0
    (fault,) = fed["faults"]
    assert fault["round_before"] == 3 and fault["next_completed_round"] == 4 and fault["to_next_round_s"] == 2.0
    assert fault["rounds_with_failures"] == [4] and fault["server"] is False
    assert fed["rounds"][3]["failed_clients"] == ["node1"] and fed["rounds"][3]["sampled"] == ["node1", "node2"]
    assert fed["rounds_lost_to_server_crash"] is None
    assert fed["quality"]["final"] == {"round": 5, "eval_loss": 0.3, "eval_accuracy": 0.9}
    assert "not checked" in text_lines(fed)[-1]


def test_a_round_with_no_result_is_failed() -> None:
    rounds = [_round(10, 1, 2, 0, ["node1", "node2"]), _round(20, 2, 0, 2, ["node1", "node2"], ["node1", "node2"]),
              _round(21, 3, 2, 0, ["node1", "node2"])]
    fed = federated_metrics(_history(rounds, []), planned_rounds=3)
    assert fed is not None and fed["rounds_failed"] == 1 and fed["rounds_completed"] == 2
    assert any("failed: nothing aggregated" in line for line in text_lines(fed))


def test_server_crash_that_ends_training_counts_rounds_lost_and_says_why() -> None:
    rounds = [_round(10 + r, r, 2, 0, ["node1", "node2"]) for r in range(1, 5)]
    fed = federated_metrics(_history(rounds, [(14.2, "node0")], reason="failed"), planned_rounds=10)
    assert fed is not None
    assert fed["rounds_lost_to_server_crash"] == 6
    assert fed["faults"][0]["server"] is True and fed["faults"][0]["next_completed_round"] is None
    why = server_ended_training(fed, completed=False)
    assert why is not None and "single point of failure" in why and "round 4 of 10" in why
    assert server_ended_training(fed, completed=True) is None


def test_restarted_server_that_ignores_its_saved_model_redoes_rounds() -> None:
    first = [_round(10 + r, r, 2, 0, ["node1", "node2"], pid=100) for r in range(1, 5)]
    again = [_round(30 + r, r, 2, 0, ["node1", "node2"], pid=200) for r in range(1, 7)]
    fed = federated_metrics(_history(first + again, [(14.5, "node0")]), planned_rounds=6)
    assert fed is not None
    assert fed["rounds_redone"] == 4 and fed["rounds_lost_to_server_crash"] == 4
    assert fed["rounds_completed"] == 6 and fed["round_executions"] == 10
    assert expectation_values(fed)["rounds_redone"] == 4


def test_quality_row_against_golden() -> None:
    rounds = [_round(10, 1, 2, 0, ["node1", "node2"], loss=0.4, acc=0.85)]
    golden = {"federated_final": {"round": 1, "eval_loss": 0.35, "eval_accuracy": 0.9}, "losses": {"1": 0.35}}
    fed = federated_metrics(_history(rounds, [], finished={"step": 1, "eval_loss": 0.4, "eval_accuracy": 0.85}),
                            golden=golden, planned_rounds=1)
    assert fed is not None
    q = fed["quality"]
    assert q["eval_loss_delta"] == 0.05 and q["eval_accuracy_delta"] == -0.05
    values = expectation_values(fed)
    assert values["accuracy_drop"] == 0.05 and values["loss_increase"] == 0.05
    # a golden summary from before federated_final: its last loss, accuracy not checked
    fed = federated_metrics(_history(rounds, []), golden={"losses": {"1": 0.35}}, planned_rounds=1)
    assert fed is not None and fed["quality"]["golden"] == {"round": 1, "eval_loss": 0.35, "eval_accuracy": None}
    assert fed["quality"]["eval_accuracy_delta"] is None


def test_no_rounds_no_federated_section() -> None:
    events = [{"t": 1.0, "source": "workload", "event": "step_completed", "node": "node0", "pid": 1, "step": 1}]
    assert federated_metrics(events) is None
    assert federated_metrics(History([], StepTable.of(events))) is None  # an indexed history (steps in a table)
    rounds = [_round(10, 1, 2, 0, ["node1", "node2"])]
    fed = federated_metrics(History(_history(rounds, [])), planned_rounds=1)
    assert fed is not None and fed["rounds_completed"] == 1


# expect.federated is a section of every scenario (the shared model does not need the flower launcher registered)
SCENARIO = """
name: f
cluster: {nodes: 2}
workload: {name: ddp-mlp}
expect:
  federated: {rounds_failed: {max: 0}, to_next_round_s: {max: 30}, accuracy_drop: {max: 0.1}}
"""


def test_expect_federated_bounds() -> None:
    scenario = parse_scenario(SCENARIO)
    rounds = [_round(10, 1, 2, 0, ["node1", "node2"]), _round(20, 2, 0, 2, ["node1", "node2"], ["node1", "node2"]),
              _round(21, 3, 2, 0, ["node1", "node2"])]
    fed = federated_metrics(_history(rounds, [(15, "node1")]), planned_rounds=3)
    out = {x["name"]: x for x in evaluate_federated_expectations(scenario, fed)}
    assert out["federated.rounds_failed"]["ok"] is False and out["federated.rounds_failed"]["value"] == 1
    assert out["federated.to_next_round_s"]["ok"] is True and out["federated.to_next_round_s"]["value"] == 6.0
    assert out["federated.accuracy_drop"]["ok"] is False and "not measured" in out["federated.accuracy_drop"]["why"]
    none = {x["name"]: x for x in evaluate_federated_expectations(scenario, None)}
    assert none["federated.rounds_failed"]["ok"] is False and "no federated round" in none["federated.rounds_failed"][
        "why"]
