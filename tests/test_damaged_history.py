"""``chaos report`` on damaged histories (tests/data/hostile/histories): it says which lines it could not read,
computes what the rest allows, labels a history without ``run_ended`` incomplete, and never shows a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chaos.cli import main

HISTORIES = Path(__file__).resolve().parent / "data/hostile/histories"
SCENARIO = "name: hist\ncluster: {nodes: 1}\nworkload: {name: ddp-mlp, args: {steps: 2}}\nchecks: {golden: false}\n"

# history → (unreadable line numbers, complete, steps completed)
EXPECTED = {
    "truncated-last-line": ([6], True, 2),
    "number-line": ([3], True, 2),
    "non-numeric-t": ([3], True, 2),
    "not-utf8": ([3], True, 2),
    "wrong-field-type": ([5], True, 2),
    "engine-killed": ([], False, 2),
    "garbage-and-blank": ([2, 8, 9], True, 2),
}


def test_every_corpus_history_has_an_expectation() -> None:
    assert {p.stem for p in HISTORIES.glob("*.jsonl")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_report_on_damaged_history(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / name
    run_dir.mkdir()
    shutil.copy(HISTORIES / f"{name}.jsonl", run_dir / "events.jsonl")
    (run_dir / "scenario.yaml").write_text(SCENARIO)
    (run_dir / "golden.json").write_bytes(b"{not json")  # damaged too: the comparison is skipped, not fatal
    code = main(["report", str(run_dir)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    lines, complete, steps = EXPECTED[name]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["history"] == {"complete": complete, "unreadable_count": len(lines), "unreadable_lines": lines}
    assert result["steps_completed"] == steps
    if lines:
        assert f"{len(lines)} line(s) of events.jsonl could not be read" in out.out
        assert "line " + ", ".join(map(str, lines)) in out.out
    if complete:
        assert code == 0 and result["verdict"] == "pass", result["why"]
    else:
        assert code == 1 and "incomplete history" in out.out and "incomplete history" in result["why"]


def test_report_with_damaged_scenario_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(HISTORIES / "engine-killed.jsonl", tmp_path / "events.jsonl")
    (tmp_path / "scenario.yaml").write_bytes(b"name: x\n\xffworkload: {name: ddp-mlp}\n")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'scenario.yaml'}: byte 8: not UTF-8" in err and "Traceback" not in err


def test_report_on_unreadable_history_file_gives_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "events.jsonl").mkdir()  # exists, but is no file
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cannot analyse this run directory" in err and "Traceback" not in err
