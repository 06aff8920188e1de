"""Verdicts never say ok about what they did not see, and use the right words (issue 32), on hand-built histories:
empty evidence is "not checked" with the reason, a test that did not happen exits 3 (not 1), the tolerance and
world sizes reported are the ones used, printed losses are equal at their printed precision (not bitwise), and a
job that trained every step and then did not exit is said to have done so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.checkpoints import digests_ok, exactly_once, golden_summary, matches_golden
from chaos.analysis.result_json import build_result
from chaos.analysis.verdict import Verdict
from chaos.events import EndReason, Ev, Source
from chaos.loading import parse_scenario
from tests.histories import H
from tests.test_checkpoint_verdicts import Job

BROKEN = Path(__file__).resolve().parent / "broken"


def ddp_mlp(steps: int, faults: str = "[]") -> Any:
    return parse_scenario(f"name: s\nworkload: {{name: ddp-mlp, args: {{steps: {steps}}}}}\nfaults: {faults}\n"
                          "checks: {golden: false}\n")


# ------------------------------------------------------------------------------------------ A: not checked

def test_digests_ok_with_nothing_loaded_is_not_checked() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    v = digests_ok(j.save(4).finish(4))  # the probe reports checkpoint events: loads are visible, none happened
    assert v.ok is None and v.why == "not checked: no checkpoint was loaded", v


def test_exactly_once_over_no_complete_epoch_is_not_checked() -> None:
    j = Job().start("a").step(1)  # half of epoch 0 (2 steps per epoch): nothing can be said about skips
    v = exactly_once(j.finish(1))
    assert v.ok is None and v.why.startswith("not checked: no epoch was completed"), v
    assert "0 complete epoch" not in v.why
    j = Job().start("a").step(1, ids=[0, 1, 2, 0])  # a sample twice inside that half epoch is still seen: fails
    assert exactly_once(j.finish(1)).ok is False


def printed(losses: dict[int, float], end: str = EndReason.COMPLETED, nodes: int = 1,
            rounds: list[int] | None = None) -> list[dict[str, Any]]:
    """A print-only job's history (steps read from its output, no probe) on ``nodes`` nodes of one process each:
    ``rounds`` are the rendezvous rounds' node counts (torchrun's agent), one before the steps."""
    plan = {"nodes": [{"name": f"node{i}", "role": "node", "argv": ["python", "-m", "torch.distributed.run",
                                                                    f"--nnodes={nodes}:{nodes}",
                                                                    "--nproc-per-node=1", "job.py"]}
                      for i in range(nodes)], "faults": []}
    events: list[dict[str, Any]] = [{"t": 0.0, "source": Source.ENGINE, "event": Ev.RUN_STARTED, "run_id": "r",
                                     "plan": plan}]
    for i, size in enumerate(rounds or []):
        events.append({"t": 0.1 + i, "source": Source.AGENT, "event": Ev.AGENT_RENDEZVOUS_COMPLETED, "node": "node0",
                       "group_world_size": size})
    events.append({"t": 10.0, "source": Source.PROGRESS, "event": Ev.PROCESS_STARTED, "node": "node0",
                   "pid": "node0:1"})
    for s, loss in sorted(losses.items()):
        events.append({"t": 10.0 + s, "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED, "node": "node0",
                       "pid": "node0:1", "step": s, "loss": loss})
    events.append({"t": 20.0 + len(losses), "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": end,
                   "why": end})
    return events


def test_a_print_only_run_that_did_not_finish_is_not_diverged() -> None:
    golden = golden_summary(printed({s: 1.0 / s for s in range(1, 301)}))
    v = matches_golden(printed({s: 1.0 / s for s in range(1, 151)}, end=EndReason.HUNG), golden)
    assert v.ok is None and v.get("mode") == "not_checked", v
    assert v.why == ("not checked: the run did not finish (it ended hung; 150 of the golden run's 300 steps are "
                        "in the surviving lineage)")
    # one that finished with steps missing did diverge
    v = matches_golden(printed({s: 1.0 / s for s in range(1, 151)}), golden)
    assert v.ok is False and "only 150 of the golden run's 300 steps" in v.why


def not_fired() -> list[dict[str, Any]]:
    """A run that trained its 8 steps with its checkpoint verdicts fine, whose planned crash never fired."""
    j = Job()
    j.events.append({"t": 0.0, "source": Source.ENGINE, "event": Ev.RUN_STARTED, "run_id": "r", "plan": {
        "faults": [{"id": 0, "kind": "crash", "target": "node1", "trigger": {"at_step": 1000}}]}})
    j.start("a")
    for s in range(1, 9):
        j.step(s, duration_s=1.0)
    events = j.save(8).finish(8)
    events.insert(-1, {"t": events[-1]["t"] - 0.5, "source": Source.ENGINE, "event": Ev.FAULT_NOT_REACHED,
                       "fault_id": 0, "kind": "crash", "target": "node1",
                       "why": "at_step 1000 never reached (the job ended at 8)"})
    return events


def test_a_run_whose_fault_never_fired_reports_no_ok_and_no_goodput() -> None:
    result = build_result(Path("r"), ddp_mlp(8, "[{kind: crash, target: 1, at_step: 1000}]"), not_fired(), None)
    assert result["verdict"] == "error"
    for name, v in result["checkpoint"].items():
        assert v["ok"] is not True, (name, v)
    v = result["checkpoint"]["resumed_from_newest_valid"]
    assert v["ok"] is None and v["why"] == "not checked: the planned fault never fired (#0 crash on node1: " \
                                          "not_reached)", v
    assert v["seen"] == "the job never restarted"  # what was seen stays readable
    assert result["checkpoint"]["exactly_once"]["ok"] is None
    assert result["goodput"] is None and result["goodput_why"].startswith("not reported: the planned fault never")
    # the same run without the fault planned reports both
    events = [e for e in not_fired() if e["event"] != Ev.FAULT_NOT_REACHED]
    events[0] = {**events[0], "plan": {"faults": []}}
    result = build_result(Path("r"), ddp_mlp(8), events, None)
    assert result["goodput"] is not None and "goodput_why" not in result
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is True


# ------------------------------------------------------------------------------------------ B: exit codes

def run_dir_of(tmp_path: Path, events: list[dict[str, Any]], scenario: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "scenario.yaml").write_text(scenario)
    return run


def test_a_test_that_did_not_happen_exits_3_and_a_broken_job_1(tmp_path: Path) -> None:
    from chaos.cli import main
    from chaos.run_result import exit_code_for

    assert [exit_code_for(v) for v in ("pass", "fail", "hung", "restart_loop", "error")] == [0, 1, 1, 1, 3]
    scenario = ("name: s\nworkload: {name: ddp-mlp, args: {steps: 8}}\n"
                "faults: [{kind: crash, target: 1, at_step: 1000}]\nchecks: {golden: false}\n")
    assert main(["report", str(run_dir_of(tmp_path, not_fired(), scenario)), "--format", "text"]) == 3


def test_the_junit_report_of_an_error_is_an_error(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from chaos.reports import write_report

    scenario = ("name: s\nworkload: {name: ddp-mlp, args: {steps: 8}}\n"
                "faults: [{kind: crash, target: 1, at_step: 1000}]\nchecks: {golden: false}\n")
    suite = ET.parse(write_report(run_dir_of(tmp_path, not_fired(), scenario), "junit")).getroot()
    assert suite.get("errors") == "1", ET.tostring(suite)
    [run] = [c for c in suite.iter("testcase") if c.get("name") == "run"]
    error = run.find("error")
    assert error is not None and run.find("failure") is None
    assert error.get("message", "").startswith("error: the test did not happen: planned fault(s) did not happen")


def test_the_pytest_plugin_reports_an_error_as_an_error(pytester: pytest.Pytester) -> None:
    """A scenario that cannot start is a pytest error (JUnit <error>) saying the test did not happen."""
    pytester.makefile(".chaos.yaml", never=f"""\
name: never-starts
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {BROKEN / 'fails_at_start.py'}]
  progress_regex: 'step (?P<step>\\d+)'
checks: {{golden: false}}
limits: {{startup_timeout_s: 60}}
""")
    junit = pytester.path / "junit.xml"
    out = pytester.runpytest_inprocess("-p", "no:benchmark", "--chaos-scenarios", f"--junitxml={junit}", "-q")
    out.assert_outcomes(errors=1)
    out.stdout.fnmatch_lines(["*error: the test did not happen*", "*verdict error: the workload failed to start*"])
    import xml.etree.ElementTree as ET

    [case] = list(ET.parse(junit).getroot().iter("testcase"))
    assert case.find("error") is not None and case.find("failure") is None


# ------------------------------------------------------------------------------------------ C: the right words

def test_the_tolerance_source_is_the_tolerance_used() -> None:
    golden = golden_summary(printed({s: 1.0 / s for s in range(1, 11)}))
    diverged = {s: (1.0 / s) * (1.1 if s > 5 else 1.0) for s in range(1, 11)}  # beyond any noise band
    v = matches_golden(printed(diverged), golden)
    assert v.get("mode") == "diverged" and v.get("tolerance_rel") == 1e-3, v
    assert v.get("tolerance_source") == "band_ceiling", v


def test_world_sizes_come_from_the_rendezvous_rounds_and_the_plan() -> None:
    losses = {s: 1.0 / s for s in range(1, 11)}
    # a 2-node print-only job: its steps say no world size; the plan's nodes and processes per node do
    assert golden_summary(printed(losses, nodes=2))["world_sizes"] == [2]
    # an elastic one that went from 3 nodes to 2: the round each step ran in
    events = printed(losses, nodes=3, rounds=[3])
    events.insert(-6, {"t": 15.5, "source": Source.AGENT, "event": Ev.AGENT_RENDEZVOUS_COMPLETED, "node": "node0",
                       "group_world_size": 2})
    events.sort(key=lambda e: e["t"])
    assert golden_summary(events)["world_sizes"] == [2, 3]
    v = matches_golden(events, golden_summary(printed(losses, nodes=3)), rtol=None)
    assert v.get("world_sizes") == [2, 3] and v.get("world_size_changed") and v.get("mode") == "within_tolerance", v
    # a golden.json from before (no world_size_basis: 1 where a step did not say) is compared by its own rule
    old = {**golden_summary(printed(losses, nodes=2)), "world_sizes": [1]}
    del old["world_size_basis"]
    v = matches_golden(printed(losses, nodes=2), old)
    assert not v.get("world_size_changed") and v.get("world_sizes") == [2], v


def test_printed_losses_are_equal_at_their_precision_not_bitwise() -> None:
    four = {s: round(1.0 / s, 4) for s in range(1, 11)}  # printed with :.4f
    v = matches_golden(printed(four), golden_summary(printed(four)))
    assert v.ok is True and v.get("mode") == "equal_as_printed" and v.get("printed_decimals") == 4, v
    assert "equal at the printed precision (4 decimals)" in v.why and "bitwise" not in v.why.split(";")[0]
    whole = {s: 0.6759000619252523 / s for s in range(1, 11)}  # printed whole (a float's repr): bitwise
    v = matches_golden(printed(whole), golden_summary(printed(whole)))
    assert v.get("mode") == "bitwise", v


def test_an_expected_bitwise_is_not_met_by_equal_as_printed() -> None:
    from chaos.analysis.result_json import evaluate_checkpoint_expectations

    verdicts = {"matches_golden": Verdict(True, "", {"mode": "equal_as_printed"})}
    for limit, ok in (("bitwise", False), ("within_noise", True), ("within_tolerance", True)):
        s = parse_scenario("name: s\nworkload: {name: ddp-mlp}\n"
                           f"expect: {{checkpoint: {{matches_golden: {limit}}}}}\n")
        assert evaluate_checkpoint_expectations(s, verdicts)[0]["ok"] is ok, limit


# ------------------------------------------------------------------------------------------ D: done, not exited

def test_a_job_that_trained_every_step_and_did_not_exit_says_so() -> None:
    h = H().start(2)
    for n in ("node0", "node1"):
        h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": n})
    h.steps(1, 200)
    h.events.append({"t": h.t + 0.5, "source": Source.ENGINE, "event": Ev.NODE_EXITED, "node": "node0", "code": 0})
    h.events.append({"t": h.t + 0.6, "source": Source.AGENT, "event": Ev.AGENT_WORKERS_FAILED, "node": "node1"})
    h.t += 60
    h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": EndReason.HUNG,
                     "why": "no step for 60s (stuck at step 200)"})
    events = sorted(h.events, key=lambda e: e["t"])
    result = build_result(Path("r"), ddp_mlp(200), events, None)
    assert result["verdict"] == "hung"
    assert result["why"].startswith("all steps done (200 of 200); 1 node(s) did not exit: node1 (its workers failed "
                                    "after the last step"), result["why"]
    assert "stopped: no step for 60s" in result["why"]
    # stuck before the end: the engine's words alone
    result = build_result(Path("r"), ddp_mlp(400), events, None)
    assert result["why"].startswith("no step for 60s (stuck at step 200)"), result["why"]
