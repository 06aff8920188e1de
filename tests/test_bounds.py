"""Bounds on time and input (issue 29, parts 4 and 5): a ``progress_regex`` that backtracks on the job's output
ends the run as an error naming the line, within the deadline and with its result written, and a stop signal
during such a match is obeyed; scenarios the engine could only fail on (a checkpoint_dir that is a file, a NUL in
``workload.env``, a latency of 1e300 s, oom_kill where there is no worker to kill) are refused by ``chaos
validate`` with the field named, exit 2, no traceback.

The engine runs are real (``chaos run`` in a subprocess, a plain Python script printing its steps: a few seconds),
so a hang is a failed test, not a stuck test run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chaos.analysis.progress_lines import unmatched_progress
from chaos.events import Ev, Source

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests/broken/backtracking_line.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# (a|aa)+$ on the 5th line (64 a's and a '!'): 2^64 ways to split the a's before the match fails
BACKTRACKING = r"step (?P<step>\d+) (a|aa)+$"
DEADLINE_S = 30


def _scenario(tmp_path: Path, bad_steps: str = "5") -> Path:
    path = tmp_path / "backtracking.yaml"
    path.write_text(f"""\
name: backtracking
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {SCRIPT}, "200", "{bad_steps}"]
  progress_regex: '{BACKTRACKING}'
checks: {{golden: false}}
limits: {{deadline_s: {DEADLINE_S}, stall_timeout_s: {DEADLINE_S}}}
""")
    return path


def _start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                            cwd=ROOT, start_new_session=True)


def _wait(proc: subprocess.Popen[str], timeout: float) -> tuple[int | None, str]:
    """The exit code and output, or None when it had not ended by then (the session is killed: no leftovers)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def _run_dir(out: Path) -> Path:
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _bad_line_number(run_dir: Path) -> int:
    lines = (run_dir / "logs" / "node0.log").read_text().split("\n")
    return next(i for i, line in enumerate(lines, 1) if line.endswith("!"))


def test_a_backtracking_progress_regex_ends_the_run_as_an_error_naming_the_line(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    t0 = time.monotonic()
    code, output = _wait(_start([sys.executable, "-m", "chaos", "run", str(_scenario(tmp_path)), "--out",
                                 str(out)]), DEADLINE_S + 30)
    elapsed = time.monotonic() - t0
    assert code is not None, f"still running after {elapsed:.0f}s (deadline {DEADLINE_S}s):\n{output[-3000:]}"
    assert elapsed < DEADLINE_S + 15 and "Traceback" not in output, output[-3000:]  # + the CLI's own start
    run_dir = _run_dir(out)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["verdict"] == "error" and result["end_reason"] == "error", result["why"]
    n = _bad_line_number(run_dir)
    assert f"progress_regex took too long on line {n} of {run_dir / 'logs' / 'node0.log'}" in result["why"], \
        result["why"]
    assert result["steps_completed"] == 4  # the lines before it were followed as ever


def test_a_stop_signal_during_a_long_match_ends_the_run_promptly(tmp_path: Path) -> None:
    """SIGINT while the engine matches a line (the bound raised to 10 minutes, so the match is still going when
    the signal comes): the run is interrupted, torn down and written in seconds, though more such lines wait to be
    read at teardown (where stop signals are ignored: before, the teardown matched them, unbounded)."""
    out = tmp_path / "runs"
    code = ("import sys; import chaos.engine.progress as p; p.LINE_TIMEOUT_S = 600.0; from chaos.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = _start([sys.executable, "-c", code, "run", str(_scenario(tmp_path, "5,6,7,8,9,10")), "--out",
                   str(out)])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:  # the job printed the line the engine will be stuck on
            logs = list(out.glob("*/logs/node0.log")) if out.is_dir() else []
            if logs and "!" in logs[0].read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the job never printed its 5th line")
        # The engine reads the log every 20 ms and then matches that line with all its CPU: wait until it has
        # spent 0.3 CPU-s since the line was seen (it is in the match now) rather than a fixed 1.5 s of matching.
        engine = psutil.Process(proc.pid)
        since = sum(engine.cpu_times()[:2])
        while sum(engine.cpu_times()[:2]) - since < 0.3:
            if time.monotonic() > deadline:
                pytest.fail("the engine never started matching the 5th line")
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code_, output = _wait(proc, 20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code_ is not None, f"SIGINT not obeyed within 20s:\n{output[-3000:]}"
    assert time.monotonic() - t0 < 15 and "Traceback" not in output, output[-3000:]
    result = json.loads((_run_dir(out) / "result.json").read_text())
    assert result["end_reason"] == "interrupted", result["why"]


def test_the_analysis_bounds_a_backtracking_regex_too(tmp_path: Path) -> None:
    """A run without a recorded step is explained by matching the regex against its logs afterwards (`chaos
    report` on any run directory): bounded the same way, so the report is written instead of waiting forever."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node0.log").write_text("".join(f"step {s} {'a' * 64}!\n" for s in range(1, 50)))
    events = [{"t": 1.0, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": "node0"}]
    t0 = time.monotonic()
    assert unmatched_progress(tmp_path, BACKTRACKING, events) is None  # no verdict on the regex: it took too long
    assert time.monotonic() - t0 < 10


# The scenarios the engine could only fail on, each refused by validate at its field (issue 29, part 5).
def _refused(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """file name -> (its text, what the error must say after ``file:line: ``)."""
    afile = tmp_path / "allowed" / "not-a-dir"
    afile.parent.mkdir()
    afile.write_text("x")
    return {
        "checkpoint-dir-a-file.yaml": (f"""\
name: ckpt-file
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {SCRIPT}]
  progress_regex: 'step (?P<step>\\d+)'
  checkpoint_dir: {afile}
allow_paths: [{afile.parent}]
""", f":6: workload.checkpoint_dir: {afile} exists and is a regular file, not a directory"),
        "nul-in-env.yaml": (f"""\
name: nul-env
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {SCRIPT}]
  progress_regex: 'step (?P<step>\\d+)'
  env: {{MY_FLAG: "on\\0off"}}
""", ":6: workload.env.MY_FLAG: contains a NUL character"),
        "latency-1e300.yaml": ("""\
name: latency
cluster: {mode: centralized, nodes: 1}
workload: {name: ddp-mlp}
faults:
  - {kind: slow_io, at_step: 10, latency: 1e300s, duration: 5s}
""", ":5: faults[0].latency: at most 316224000s (ten years), got 1e+300s"),
        "latency-over-deadline.yaml": ("""\
name: latency
cluster: {mode: centralized, nodes: 1}
workload: {name: ddp-mlp}
faults:
  - {kind: slow_io, at_step: 10, latency: 10m}
limits: {deadline_s: 120}
""", ":5: faults[0].latency: 600s is longer than the run's deadline (limits.deadline_s: 120s)"),
        "oom-kill-centralized.yaml": ("""\
name: oom
cluster: {mode: centralized, nodes: 1}
workload: {name: ddp-mlp}
faults:
  - {kind: oom_kill, target: 0, at_step: 10}
""", ":5: faults[0].kind: oom_kill cannot act on a centralized job with procs_per_node: 1"),
    }


def test_validate_refuses_what_the_engine_could_only_fail_on(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """In process (``chaos.cli.main``, what ``python -m chaos`` calls; a new interpreter would add ~0.7 CPU-s and
    prove nothing more: the CLI as a process is run by the two engine runs above)."""
    from chaos.cli import main

    cases = _refused(tmp_path)
    for name, (text, _) in cases.items():
        (tmp_path / name).write_text(text)
    try:
        code = main(["validate", "--no-machine", *(str(tmp_path / n) for n in cases)])
    except SystemExit as exc:  # what the process would exit with
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    for name, (_, said) in cases.items():
        assert f"{tmp_path / name}{said}" in err, err


def test_oom_kill_is_accepted_where_torchrun_starts_workers(tmp_path: Path) -> None:
    from chaos.loading import parse_scenario

    for cluster in ("{mode: centralized, nodes: 1, procs_per_node: 2}", "{mode: elastic, nodes: 2}"):
        parse_scenario(f"name: oom\ncluster: {cluster}\nworkload: {{name: ddp-mlp}}\n"
                       "faults:\n  - {kind: oom_kill, target: 0, at_step: 10}\n")


def test_a_checkpoint_dir_made_a_file_after_validation_is_refused_by_the_plan(tmp_path: Path) -> None:
    """The file appears between validate and run: the plan (which the engine builds before creating anything in
    the checkpoint directory) refuses it with the field, instead of the engine's FileExistsError."""
    from chaos.loading import parse_scenario
    from chaos.plan import PlanError, build_plan

    target = tmp_path / "allowed" / "ckpt"
    target.parent.mkdir()
    scenario = parse_scenario(f"""\
name: later
cluster: {{mode: centralized, nodes: 1}}
workload: {{command: [python, {SCRIPT}], progress_regex: 'step (?P<step>\\d+)', checkpoint_dir: {target}}}
allow_paths: [{target.parent}]
""")
    target.write_text("now a file")
    with pytest.raises(PlanError, match=r"^workload\.checkpoint_dir: .* exists and is a regular file"):
        build_plan(scenario, "r", tmp_path / "run")


def test_explore_bounds_are_judged_like_the_faults_they_generate() -> None:
    """explore.kinds on a layout the kind cannot act on, a kind whose default time outlasts the deadline, and
    durations past it: every plan drawn from such bounds would be refused, so the bounds are."""
    from chaos.loading import ScenarioInvalid, parse_scenario

    with pytest.raises(ScenarioInvalid) as info:
        parse_scenario("name: ex\ncluster: {mode: centralized, nodes: 1}\nworkload: {name: ddp-mlp}\n"
                       "explore: {kinds: [oom_kill], durations: [1, 50]}\nlimits: {deadline_s: 20}\n")
    text = str(info.value)
    assert "explore.kinds: oom_kill cannot act on a centralized job with procs_per_node: 1" in text, text
    assert "explore.kinds: oom_kill's wait (30s, its default) is longer than the run's deadline" in text, text
    assert "explore.durations: 50s is longer than the run's deadline (limits.deadline_s: 20s)" in text, text


def test_a_stored_run_with_times_refused_today_is_still_read() -> None:
    """A run directory written before these bounds keeps its analysis: its stored scenario is not judged again."""
    from chaos.loading import parse_scenario

    text = (ROOT / "tests/data/hostile/scenarios/latency-1e300.yaml").read_text()
    assert parse_scenario(text, "scenario.yaml", stored=True).faults[0].latency == 1e300
