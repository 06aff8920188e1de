"""Hostile and careless input (issue 11): every scenario in tests/data/hostile/scenarios is refused with its file,
line and field and no traceback, validate and run share that judgement, and paths stay in the blast radius."""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.admission import admit
from chaos.loading import MAX_FILE_BYTES, ScenarioInvalid, parse_scenario
from chaos.plan import PlanError, build_plan
from chaos.workload_args import DDP_MLP, add_arguments

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests/data/hostile/scenarios").glob("*.yaml"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _expected(path: Path) -> str:
    return path.read_bytes().split(b"\n")[0].decode().removeprefix("# expect: ")


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_hostile_scenario_is_refused_with_file_line_and_field(path: Path) -> None:
    with pytest.raises(ScenarioInvalid) as info:
        admit(path, machine=False)
    text = str(info.value)
    want = _expected(path)
    # `:N: field: ...` right after the file name when the corpus names a line, else somewhere after it
    assert (str(path) + want) in text if want.startswith(":") else (str(path) in text and want in text), text


def test_whole_corpus_through_the_cli_in_bounded_memory_and_time() -> None:
    """`chaos validate` on every hostile file at once, under 1.5 GB of address space: exit 2, each file named,
    no traceback. The corpus holds the alias bomb (before the fix the CLI grew to ~9 GB on it and never finished),
    refused with its line: one CLI process for every file (each process pays the package's import)."""
    bomb = ROOT / "tests/data/hostile/scenarios/alias-bomb.yaml"
    assert bomb in CORPUS
    files = " ".join(str(p) for p in CORPUS)
    proc = subprocess.run(["bash", "-c", f"ulimit -v 1500000; exec {sys.executable} -m chaos validate --no-machine "
                           f"{files}"], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert all(str(p) in proc.stderr for p in CORPUS), proc.stderr
    assert f"{bomb}:3: YAML alias *a is not accepted" in proc.stderr


def test_nul_in_command_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nul.yaml"
    path.write_text(f"name: nul\nworkload:\n  command: [python, {sys.executable}, \"a\\0b\"]\n"
                    "  progress_regex: 'step (?P<step>\\d+)'\n")
    with pytest.raises(ScenarioInvalid, match=r"workload\.command: an argument contains a NUL character"):
        admit(path, machine=False)


def test_validate_and_run_refuse_alike_and_markup_is_not_eaten(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """In process (``chaos.cli.main``, what ``python -m chaos`` calls): the CLI as a separate process is run by
    ``test_whole_corpus_through_the_cli_in_bounded_memory_and_time``."""
    from chaos.cli import main

    path = ROOT / "tests/data/hostile/scenarios/elastic-not-python.yaml"
    outputs = []
    for argv in (["validate", "--no-machine", str(path)], ["run", str(path), "--dry-run", "--out", str(tmp_path)]):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        outputs.append(err)
    assert outputs[0] == outputs[1]
    assert "write command: [python, train.py, ...]" in outputs[0]  # rich markup would have eaten the brackets


def test_what_users_and_their_jobs_wrote_is_printed_as_written(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """rich reads "[...]" as a style and ":name:" as an emoji: a worker's "[rank0]: ..." line in a verdict's why, a
    path or a plug-in's entry point lost its text, and a stray "[/x]" turned the print into a traceback."""
    import json

    from chaos.cli import main
    from chaos.run_result import RunResult

    tricky = "[rank0]: boom [/x] :smile: [bold]ghost:Ghost:"
    assert main(["validate", "--no-machine", str(tmp_path / f"{tricky}.yaml")]) == 2
    assert f"{tricky}.yaml: cannot read file" in capsys.readouterr().err
    result = json.loads((ROOT / "tests/data/histories/quickstart/result.json").read_text())
    result["why"] = result["scenario"] = tricky
    result["faults"][0]["mechanism"] = tricky
    result["checkpoint"]["digests_ok"]["why"] = tricky
    table = RunResult(result, tmp_path).table()
    assert table.count(tricky[:12]) >= 4 and ":smile:" in table and "[/x]" in table, table

def test_too_big_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\n" + "#" * MAX_FILE_BYTES)
    with pytest.raises(ScenarioInvalid, match=f"big.yaml: larger than {MAX_FILE_BYTES} bytes"):
        admit(path, machine=False)


def _train_parse_args() -> Callable[[list[str]], argparse.Namespace]:
    """workloads/train.py's own ``parse_args``, run without importing train.py (that imports torch, 3-5 s here):
    its function as written there, with the names train.py imports from chaos.workload_args (checked)."""
    path = ROOT / "workloads" / "train.py"
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "chaos.workload_args"
                for a in n.names}
    assert {"DDP_MLP", "add_arguments"} <= imported
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args"]
    namespace: dict[str, Any] = {"argparse": argparse, "DDP_MLP": DDP_MLP, "add_arguments": add_arguments,
                                 "__doc__": ast.get_docstring(tree)}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["parse_args"]  # type: ignore[no-any-return]


def test_workload_declares_its_arguments_once() -> None:
    """train.py's parser is built from chaos.workload_args.DDP_MLP: same names, types and defaults."""
    parse_args = _train_parse_args()
    args = vars(parse_args(["--checkpoint-dir", "x"]))
    assert set(args) == set(DDP_MLP)
    assert all(args[k] == a.default for k, a in DDP_MLP.items() if k != "checkpoint_dir")
    schema = __import__("chaos.scenario", fromlist=["Scenario"]).Scenario.model_json_schema()
    shipped = schema["$defs"]["ShippedWorkload"]["properties"]["args"]
    assert shipped["properties"]["steps"]["type"] == "integer" and shipped["additionalProperties"] is False


def test_good_workload_args_pass() -> None:
    parse_scenario("name: ok\nworkload: {name: ddp-mlp, args: {steps: 50.0, lr: '1e-3', bug: no-digest-check}}")


def _command_scenario(checkpoint_dir: str, allow: list[str] | None = None) -> object:
    allow_line = f"allow_paths: {allow}\n" if allow else ""
    return parse_scenario(f"name: c\n{allow_line}workload:\n  command: [python, {sys.executable}]\n"
                          f"  progress_regex: 'step (?P<step>\\d+)'\n  checkpoint_dir: {checkpoint_dir}\n")


def test_symlinked_checkpoint_dir_is_refused_when_the_plan_is_built(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    outside = tmp_path / "precious"
    outside.mkdir()
    (run_dir / "ck").symlink_to(outside)
    with pytest.raises(PlanError, match="outside the run directory"):
        build_plan(_command_scenario("ck"), "r", run_dir)  # type: ignore[arg-type]
    plan = build_plan(_command_scenario("ck", [str(outside)]), "r", run_dir)  # type: ignore[arg-type]
    assert plan.checkpoint_dir == outside.resolve()


def test_allowed_absolute_checkpoint_dir_is_accepted(tmp_path: Path) -> None:
    scenario = _command_scenario(str(tmp_path / "ck"), [str(tmp_path)])
    plan = build_plan(scenario, "r", tmp_path / "runs" / "r")  # type: ignore[arg-type]
    assert plan.checkpoint_dir == (tmp_path / "ck").resolve()


def test_python_dash_m_runs_under_torchrun() -> None:
    scenario = parse_scenario("name: m\nworkload:\n  command: [python, -m, mypkg.train, --x, 1]\n"
                              "  progress_regex: 'step (?P<step>\\d+)'\n")
    plan = build_plan(scenario, "r", Path("/tmp/r"))
    assert plan.nodes[0].argv[-4:] == ["-m", "mypkg.train", "--x", "1"]


def test_python_dash_c_runs_as_one_plain_process() -> None:
    scenario = parse_scenario("name: c\ncluster: {mode: centralized, nodes: 1}\nworkload:\n"
                              "  command: [python, -c, \"print('step 1')\"]\n  progress_regex: 'step (?P<step>\\d+)'\n")
    plan = build_plan(scenario, "r", Path("/tmp/r"))
    assert plan.nodes[0].argv[1:] == ["-c", "print('step 1')"]


@pytest.mark.parametrize("argv", [
    ["run", "quickstart", "--out", "{file}"],
    ["run", "quickstart", "--dry-run", "--out", "{file}/runs"],
    ["run", "quickstart", "--dry-run", "--golden-cache", "{file}"],
    ["explore", "quickstart", "--budget", "1", "--out", "{file}"],
    ["compare", "quickstart", "centralized-crash", "--out", "{file}"],
])
def test_an_output_directory_that_is_a_file_is_refused_before_anything_runs(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real run made its run directory under --out and died there with NotADirectoryError's traceback."""
    from chaos.cli import main

    file = tmp_path / "a-file"
    file.write_text("not a directory\n")
    code = main([a.replace("{file}", str(file)) for a in argv])
    said = capsys.readouterr().err
    assert code == 2 and "is not a directory" in said and "Traceback" not in said, said
    assert file.read_text() == "not a directory\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_an_output_directory_name_too_long_or_a_dangling_link_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for out, said in ((str(tmp_path / ("a" * 300)), "File name too long"), (str(dangling), "is not a directory")):
        assert main(["run", "quickstart", "--dry-run", "--out", out]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err
    assert not (tmp_path / "nowhere").exists()


def test_escape_sequences_in_data_cannot_drive_the_terminal() -> None:
    """A history's mechanism or a scenario's field name with ESC, C1 or bidi characters is shown escaped, on a
    colour terminal too, while rich's own styles still render (they come from styles, not from the text)."""
    import io

    from rich.table import Table
    from rich.text import Text

    from chaos.terminal import SafeConsole

    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=True, color_system="standard", width=200, markup=False)
    table = Table("fault")
    table.add_row("\x1b[2J\x1b]0;title\x07PWNED\u202e")
    console.print(Text("verdict", style="bold red"), table)
    shown = buf.getvalue()
    assert "\\x1b[2J\\x1b]0;title" in shown and "PWNED\\u202e" in shown, shown  # (rich itself drops the BEL)
    assert "\x1b[2J" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\x1b[1;31mverdict" in shown  # rich's own colour, as before


def test_files_that_never_end_are_refused_not_waited_on(tmp_path: Path) -> None:
    """A scenario, golden.json or plan.yaml that is a FIFO (no writer: open() would wait forever) or a device is
    refused at once with its reason."""
    from chaos.analysis.run import _read_golden
    from chaos.compare import _from_plan
    from chaos.loading import load_scenario

    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioInvalid, match="not a regular file"):
        load_scenario(fifo)
    assert _read_golden(fifo) is None and _read_golden(Path("/dev/zero")) is None
    assert _from_plan(fifo, None) == {}
    bomb = tmp_path / "plan.yaml"  # 12 levels of 9 aliases: a few hundred bytes, ~10^11 values expanded
    bomb.write_text("a0: &x0 [1]\n" + "".join(f"a{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n"
                                               for i in range(1, 13)))
    assert _from_plan(bomb, None) == {}


def test_compare_replaces_a_link_where_it_writes_a_run_report(tmp_path: Path) -> None:
    """The per-run reports' names are compare's choice, in a directory that may hold anything: a link planted
    under one is replaced, the file it pointed at left alone. (The two smallest recordings: any runs show it.)"""
    from chaos.compare import run_report_name, write_comparison
    from tests.data.recorded import expand

    runs = [expand(name, tmp_path) for name in ("plain-ddp-crash", "non-atomic-save")]
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    out = tmp_path / "out"
    out.mkdir()
    (out / run_report_name(runs[0])).symlink_to(victim)
    write_comparison(runs, out)
    assert victim.read_text() == "untouched"
    assert not (out / run_report_name(runs[0])).is_symlink()


def test_damaged_numbers_are_named_not_tracebacks(tmp_path: Path) -> None:
    """One history line with a 400-digit time, a golden.json of another shape, a NaN expectation bound and
    projection options beyond what its arithmetic holds: each is a skipped line, a damaged file or an error
    naming the option."""
    from chaos.analysis.projection import ProjectionError, parse_duration_s, project
    from chaos.analysis.run import _read_golden
    from chaos.history import _field_checks, readable

    assert not readable({"t": 10**400, "event": "x"}, _field_checks())
    assert not readable({"t": -1e308, "event": "x"}, _field_checks())
    assert not readable({"t": 1.0, "event": "step_completed", "source": "workload", "step": 10**30}, _field_checks())
    golden = tmp_path / "golden.json"
    golden.write_text('{"completed": true, "losses": {"abc": 1}, "world_sizes": [1], "steps": 1}')
    assert _read_golden(golden) is None
    golden.write_text('{"completed": true, "losses": {"1": 1.0}, "steps": 1}')  # no world_sizes
    assert _read_golden(golden) is None
    golden.write_text('{"completed": true, "losses": {"1": 1.0}, "world_sizes": [1], "steps": 1}')
    assert _read_golden(golden) is not None
    with pytest.raises(ScenarioInvalid, match="finite number"):
        parse_scenario("name: n\nworkload: {name: ddp-mlp}\nexpect: {recovery_s: {max: .nan}}\n")
    with pytest.raises(ProjectionError, match="1 ms to 100 years"):
        parse_duration_s("1e-300s", "--mtbf-node")
    with pytest.raises(ProjectionError, match="--job-days"):
        project(None, None, job_days=1e-300)  # type: ignore[arg-type]  (refused before either is read)


def test_a_report_is_never_written_over_the_records_it_is_computed_from(tmp_path: Path) -> None:
    from chaos.cli import main
    from tests.data.recorded import expand

    run = expand("quickstart", tmp_path)
    history = (run / "events.jsonl").read_bytes()
    assert main(["report", str(run), "--format", "json", "-o", str(run / "events.jsonl")]) == 2
    assert (run / "events.jsonl").read_bytes() == history


def test_a_run_directory_named_in_other_bytes_than_utf8_gets_every_report(tmp_path: Path) -> None:
    """A name that is not UTF-8 comes back from the OS as lone surrogates, which no UTF-8 report can hold: the
    report prints the name's bytes escaped (\\xff) instead of failing to be written."""
    from chaos.cli import main
    from tests.data.recorded import expand

    run = expand("plain-ddp-crash", tmp_path)  # any passing run (report exits 0): the smallest one recorded
    odd = Path(os.fsdecode(os.fsencode(str(run.parent)) + b"/run-\xff\xfe"))
    run.rename(odd)
    for fmt, name in (("html", "report.html"), ("md", "report.md"), ("junit", "report.junit.xml")):
        assert main(["report", str(odd), "--format", fmt]) == 0, fmt
        assert "run-\\xff\\xfe" in (odd / name).read_text(), fmt
