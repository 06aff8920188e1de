"""``chaos report`` on damaged histories (tests/data/hostile/histories): it says which lines it could not read,
computes what the rest allows, labels a history without ``run_ended`` incomplete, and never shows a traceback."""

from __future__ import annotations

import json
import os
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
        # error (3): the test did not happen
        assert code == 3 and "incomplete history" in out.out and "incomplete history" in result["why"]


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


def test_a_line_nested_deep_or_too_long_is_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A line nested 200k deep crashed the process inside orjson < 3.10 (SIGSEGV, no message); a line of hundreds
    of MB (or a history with no newline at all) was read whole. Both are lines no event can be: skipped, counted."""
    import chaos.history

    monkeypatch.setattr(chaos.history, "MAX_LINE_BYTES", 4096)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = (HISTORIES / "garbage-and-blank.jsonl").read_text().splitlines()
    good = [line for line in good if line.strip().startswith("{") and line.rstrip().endswith("}")]
    hostile = ["[" * 200_000 + "]" * 200_000, '{"t": 1, "event": "x", "pad": "' + "a" * 10_000 + '"}']
    (run_dir / "events.jsonl").write_text("\n".join([good[0], *hostile, *good[1:]]) + "\n")
    (run_dir / "scenario.yaml").write_text(SCENARIO)
    main(["report", str(run_dir), "--format", "json"])
    assert "Traceback" not in capsys.readouterr().err
    health = json.loads((run_dir / "result.json").read_text())["history"]
    assert health["unreadable_lines"][:2] == [2, 3], health


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_history_that_is_no_regular_file_is_refused_at_once(kind: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """events.jsonl a link to /dev/zero filled memory (19 GB in a minute); a FIFO waited forever for a writer."""
    import os

    if kind == "device":
        (tmp_path / "events.jsonl").symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "events.jsonl")
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "is not a regular file" in err and "Traceback" not in err, err


def test_a_planned_fault_that_never_fired_is_shown_not_a_traceback(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The summary table took the scenario's numeric `target: 2` as it was, which rich cannot render: `chaos run`
    and `chaos report` of a run whose fault never fired ended in an error instead of saying so."""
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    events = run_dir / "events.jsonl"
    events.write_text("".join(line for line in events.read_text().splitlines(keepends=True)
                              if '"fault_injected"' not in line))
    assert main(["report", str(run_dir)]) == 3  # error: the test did not happen
    out = capsys.readouterr().out
    assert "fault 0: NOT INJECTED" in out and "planned fault(s) did not happen" in out, out


def test_outputs_replace_links_in_the_run_directory_and_never_write_through_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory may be an unpacked artifact: a link named result.json or report.html in it pointed the
    report's writes at a file outside the run directory."""
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path / "runs")
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    for name in ("result.json", "report.json"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(outside)
    assert main(["report", str(run_dir), "--format", "json"]) == 0
    assert outside.read_text() == "not yours"
    assert not (run_dir / "result.json").is_symlink() and json.loads((run_dir / "result.json").read_text())
    assert not (run_dir / "report.json").is_symlink()


def test_an_output_named_by_the_user_is_written_through_a_link_or_fifo_and_keeps_the_umask(tmp_path: Path) -> None:
    """-o /dev/stdout (a link) and a FIFO were replaced by a renamed regular file (as root: a link in /dev); and a
    report was 0644 whatever the umask."""
    import stat
    import threading

    from chaos.paths import write_output

    target = tmp_path / "target.txt"
    target.write_text("")
    link = tmp_path / "link"
    link.symlink_to(target)
    write_output(link, "through", named_by_user=True)
    assert link.is_symlink() and target.read_text() == "through"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, "piped", named_by_user=True)
    reader.join(10)
    assert got == [b"piped"] and stat.S_ISFIFO(fifo.lstat().st_mode)
    old = os.umask(0o077)
    try:
        made = write_output(tmp_path / "private.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link", "private.json", "target.txt"]  # no temp


def test_output_problems_are_named_as_such_and_a_read_only_run_still_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.analysis.run
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    assert main(["report", str(run_dir), "--format", "json", "-o", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path}: Is a directory" in err and "cannot analyse" not in err, err
    twin = shutil.copytree(run_dir, tmp_path / "twin")
    assert main(["compare", "--from-runs", str(run_dir), str(twin), "-o", str(run_dir / "events.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the comparison into" in err and "Traceback" not in err, err
    (twin / "events.jsonl").unlink()
    (twin / "events.jsonl").mkdir()  # unreadable as a history: a reading problem, not the output's
    assert main(["compare", "--from-runs", str(run_dir), str(twin), "-o", str(tmp_path / "cmp")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{twin}: cannot analyse this run directory" in err and "cannot write" not in err, err
    assert not (tmp_path / "cmp").exists()

    def read_only(analysis: object) -> dict:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(chaos.analysis.run, "write_result", read_only)
    assert main(["report", str(run_dir), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert "result.json not rewritten (Read-only file system)" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())


def test_cleanup_takes_only_a_whole_run_id_and_explore_a_sane_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """`--run-id ""` matched every run's namespaces, containers and mounts (a live one's too), like --all."""
    for run_id in ("", "anything-f534b9", "../../etc"):
        assert main(["cleanup", "--run-id", run_id]) == 2
        assert "not a run id" in capsys.readouterr().err
    for budget in ("0", "-1", "99999999999"):
        with pytest.raises(SystemExit) as exc:
            main(["explore", "quickstart", "--budget", budget])
        assert exc.value.code == 2 and "--budget: expected 1 to 10000" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [("samples", "str"), ("duration_s", []), ("comm_s", {}),
                                              ("incarnation", [])])
def test_an_optional_field_of_the_wrong_type_makes_its_line_unreadable(field: str, value: object, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Only required fields were typed: `"samples": "str"` reached arithmetic and `"incarnation": []` a dict key
    (ValueError / TypeError: the whole report failed as "cannot analyse")."""
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"step_completed"' in line and '"incarnation"' in line)
    event = json.loads(lines[at])
    event[field] = value
    lines[at] = json.dumps(event)
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    main(["report", str(run_dir), "--format", "json"])
    assert "cannot analyse" not in capsys.readouterr().err
    assert json.loads((run_dir / "result.json").read_text())["history"]["unreadable_lines"] == [at + 1]


def test_a_null_optional_field_reads_as_absent_and_an_int_incarnation_is_an_id() -> None:
    """A writer's null for an optional field (`sample_ids: null`, `epoch: null`) and an int incarnation id
    (`set_context(incarnation=3)`) were accepted until optional fields were typed; they must stay readable."""
    from chaos.history import _field_checks, readable

    base = {"t": 1.0, "event": "step_completed", "step": 1, "node": "n0", "pid": 1, "source": "workload"}
    for extra in ({"sample_ids": None}, {"epoch": None}, {"world_size": None}, {"comm_s": None}):
        event = {**base, **extra}
        assert readable(event, _field_checks()) and event == base, extra
    assert readable({**base, "incarnation": 3}, _field_checks())
    assert not readable({**base, "incarnation": True}, _field_checks())
    assert not readable({**base, "step": None}, _field_checks())  # a required field is still required


def test_a_damaged_golden_summary_is_named_not_taken_for_an_unfinished_golden_run(tmp_path: Path) -> None:
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    (run_dir / "golden.json").write_bytes(b"\x00garbage")
    main(["report", str(run_dir), "--format", "json"])
    why = json.loads((run_dir / "result.json").read_text())["checkpoint"]["matches_golden"]["why"]
    assert "golden.json in the run directory is damaged" in why, why


def test_mtbf_is_a_positive_finite_duration_and_text_reports_its_advice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--mtbf 0 was taken for "not given", 1e400 failed the analysis as an overflow, and the text format ignored
    --mtbf altogether; an MTBF shorter than a save printed a 0.0 s interval with no word of why."""
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    for bad in ("0", "1e400", "nan"):
        assert main(["report", str(run_dir), f"--mtbf={bad}"]) == 2
        assert "--mtbf: expected a" in capsys.readouterr().err
    main(["report", str(run_dir), "--mtbf", "6h"])
    assert "For MTBF M = 21600 s" in capsys.readouterr().out
    main(["report", str(run_dir), "--mtbf", "1ms"])
    assert "is no longer than one save" in capsys.readouterr().out
