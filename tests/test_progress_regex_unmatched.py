"""A print-only job whose ``progress_regex`` matches none of its lines records no step: the result must say so,
with the regex and a line it should have matched, instead of "step 70 was never reached" and "the run did not
finish" on a run that completed."""

from __future__ import annotations

from pathlib import Path

from chaos.analysis.result_json import build_result
from chaos.events import Ev, Source
from chaos.loading import parse_scenario

LINES = "".join(f"2026-12-05 16:31:02,{s:03d} INFO train: epoch 0 | iter {s}/240 | loss 1.{s:04d}\n"
                for s in range(1, 81))


def _run(tmp_path: Path, regex: str, printed: str = LINES, steps: int = 0) -> dict:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node0.log").write_text("\n===== torch-chaos: starting node0 at 1000.000\n" + printed)
    (tmp_path / "logs" / "store.log").write_text("store listening on 1234\n")
    scenario = parse_scenario(f"""\
name: typo
cluster: {{mode: centralized, nodes: 1}}
workload: {{command: [python, train.py], progress_regex: '{regex}'}}
faults:
  - {{kind: crash, target: 0, at_step: 70}}
""")
    events = [{"t": 1000.0, "source": Source.ENGINE, "event": Ev.RUN_STARTED, "run_id": "r", "scenario": "typo"},
              {"t": 1000.1, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": "store", "role": "store"},
              {"t": 1000.1, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": "node0", "replacement": False}]
    events += [{"t": 1001.0 + s / 100, "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED, "node": "node0",
                "pid": "node0:1", "step": s, "loss": 1.0} for s in range(1, steps + 1)]
    events += [{"t": 1010.0, "source": Source.ENGINE, "event": Ev.FAULT_NOT_REACHED, "fault_id": 0, "kind": "crash",
                "target": "node0", "why": "step 70 was never reached (the highest step completed was 0)"},
               {"t": 1010.0, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": "completed",
                "why": "every node finished its steps"}]
    return build_result(tmp_path, scenario, events, None)


def test_a_regex_matching_no_line_is_named_with_a_line_it_should_have_matched(tmp_path: Path) -> None:
    result = _run(tmp_path, r"Iter (?P<step>\d+)/\d+")
    assert result["verdict"] == "error" and result["end_reason"] == "completed"
    why = result["why"]
    assert why.startswith("no training step was recorded: workload.progress_regex 'Iter (?P<step>\\d+)/\\d+' "
                          "matched no line of the job's output"), why
    assert "matches when case is ignored" in why and "iter 1/240" in why
    assert "did not finish" not in result["checkpoint"]["matches_golden"]["why"]


def test_a_regex_of_another_format_shows_the_jobs_most_repeated_line(tmp_path: Path) -> None:
    why = _run(tmp_path, r"step=(?P<step>\d+)")["why"]
    assert "matched no line" in why and "most repeated line (80 times)" in why and "iter 1/240" in why, why


def test_a_regex_that_matched_says_nothing_of_the_kind(tmp_path: Path) -> None:
    result = _run(tmp_path, r"iter (?P<step>\d+)/\d+", steps=80)
    assert "progress_regex" not in result["why"]
