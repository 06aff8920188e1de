"""What a reviewer sees in a run's report (issue 35, item 3), checked on recorded real runs and on a toy run.

A diverged run's loss plot shows where it diverged and the difference per step; the timeline gives every node a
lane of its own; a scenario's description is rendered Markdown, escaped; a verdict says which bounds it held and
which figures nothing gated; a replacement count says what each replacement followed; every ``chaos run``
leaves report.html and names it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from chaos.cli import main
from chaos.reports import write_report
from chaos.reports.model import build_report
from chaos.reports.plots import loss_vs_golden, timeline
from chaos.scenario import Expect
from tests.conftest import RECORDED_REPORTS_GROUP
from tests.data.recorded import expand

BROKEN = Path(__file__).resolve().parent / "broken"
# One worker draws the recordings' default reports for this module and the others that read them (the session
# fixture recorded_report, tests/conftest.py).
pytestmark = pytest.mark.xdist_group(RECORDED_REPORTS_GROUP)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("recorded")
    return {name: expand(name, into) for name in ("plain-ddp-no-optimizer-state", "quickstart", "centralized-crash",
                                                  "plain-ddp-crash", "non-atomic-save")}


def test_a_diverged_report_marks_the_divergence_and_plots_the_difference(
        runs: dict[str, Path], recorded_report: Callable[[str, str], Path]) -> None:
    report = build_report(runs["plain-ddp-no-optimizer-state"])
    assert report.result.checkpoint["matches_golden"].get("first_divergent_step") == 102
    fig = loss_vs_golden(report)
    assert fig is not None and len(fig.axes) == 2, "the loss and, under it, this run − golden per step"
    for ax in fig.axes:  # the divergence step is a vertical line on both panels
        assert any(list(line.get_xdata()) == [102, 102] for line in ax.get_lines()), ax.get_title()
    diff = fig.axes[1].get_lines()[0]
    assert len(diff.get_xdata()) > 100 and max(abs(y) for y in diff.get_ydata()) > 0.01
    html = recorded_report("plain-ddp-no-optimizer-state", "html").read_text()
    assert "The loss diverges from the golden run&#x27;s at step 102" in html
    assert html.split("<figure id=loss>")[1].split("</figure>")[0].count('<g id="axes_') == 2


def test_a_matching_run_has_a_flat_difference_and_no_marker(runs: dict[str, Path]) -> None:
    fig = loss_vs_golden(build_report(runs["quickstart"]))
    assert fig is not None and len(fig.axes) == 2
    assert not any(len(set(line.get_xdata())) == 1 for ax in fig.axes for line in ax.get_lines()
                   if len(line.get_xdata()) == 2 and line.get_linestyle() == "--")
    assert max(abs(y) for y in fig.axes[1].get_lines()[0].get_ydata()) < 1e-3


def test_every_node_has_a_lane_of_its_own(runs: dict[str, Path], recorded_report: Callable[[str, str], Path]) -> None:
    """Three nodes at the same step drew on one another: only the last one drawn was visible."""
    report = build_report(runs["quickstart"])
    fig = timeline(report)
    assert len(fig.axes) == 3
    bottoms = [ax.get_position().y0 for ax in fig.axes]
    assert len(set(bottoms)) == 3, bottoms
    assert [ax.get_ylabel() for ax in fig.axes] == ["node0", "node1", "node2"]
    for ax in fig.axes:  # each lane draws one node's steps
        dots = [line for line in ax.get_lines() if line.get_marker() == "."]
        assert len(dots) == 1 and len(dots[0].get_xdata()) > 100
    html = recorded_report("quickstart", "html").read_text()
    assert html.split("<figure id=timeline>")[1].split("</figure>")[0].count('<g id="axes_') == 3


def test_a_description_is_rendered_markdown_and_everything_else_is_escaped(runs: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    run = tmp_path / "described"
    shutil.copytree(runs["plain-ddp-crash"], run)  # any run: the smallest distributed recording
    scenario = yaml.safe_load((run / "scenario.yaml").read_text())
    scenario["description"] = ("Crash `node2` *now*, see [the docs](https://example.org/x) or "
                               "[this](javascript:alert(1)). <script>alert(1)</script> <img src=http://e/x.png>")
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    html = write_report(run, "html").read_text()
    assert "<code>node2</code>" in html and "<em>now</em>" in html
    assert '<a rel="noopener noreferrer" href="https://example.org/x">the docs</a>' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=http://e/x.png&gt;" in html
    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html
    assert "`node2`" not in html


def test_a_pass_lists_the_bounds_it_held_and_flags_an_unbounded_recovery(
        recorded_report: Callable[[str, str], Path]) -> None:
    html = recorded_report("centralized-crash", "html").read_text()
    assert "PASS held: completes; recovery_s 2.09 s ≤ 30; lost_steps 30 ≤ 50" in html
    assert "catch-up 2.12 s: no bound set — add expect.catch_up_s: {max: ...} to the scenario" in html
    # plain-ddp-crash passes with a 31 s recovery that nothing bounded
    html = recorded_report("plain-ddp-crash", "html").read_text()
    assert "PASS held: completes (implicit)" in html
    assert "recovery 31.1 s: no bound set — add expect.recovery_s: {max: ...} to the scenario to gate on it" in html
    md = recorded_report("plain-ddp-crash", "md").read_text()
    assert "- recovery 31.1 s: no bound set" in md
    for name in ("recovery_s", "catch_up_s", "lost_steps", "slowdown"):  # the advice names real expect fields
        assert name in Expect.model_fields


def test_the_replacement_count_says_what_each_replacement_followed(recorded_report: Callable[[str, str], Path]) -> None:
    html = recorded_report("non-atomic-save", "html").read_text()
    assert ("4 node replacements: 1 after fault #0 (crash of node0, exit code -9); 3 after node0 exited by itself "
            "(exit code 1, no fault on it since its previous start)") in html
    assert "1 node replacement: 1 after fault #0 (crash of node2, exit code -9)" in recorded_report(
        "quickstart", "html").read_text()


def test_replacements_of_other_nodes_after_one_crash_are_told_apart() -> None:
    """One crash, three replacements: the crashed node, then two others whose agents gave up on their round."""
    from chaos.analysis.replacements import explain_replacements, replacement_causes

    events = [{"t": 0.0, "event": "node_started", "node": n, "replacement": False} for n in ("node0", "node1", "node2")]
    events += [{"t": 5.0, "event": "fault_injected", "fault_id": 0, "kind": "crash", "target": "node2"},
               {"t": 5.0, "event": "node_exited", "node": "node2", "code": -9, "will_replace": True},
               {"t": 6.0, "event": "node_started", "node": "node2", "replacement": True},
               {"t": 9.0, "event": "node_exited", "node": "node0", "code": 1, "will_replace": True},
               {"t": 9.1, "event": "node_exited", "node": "node1", "code": 1, "will_replace": True},
               {"t": 10.0, "event": "node_started", "node": "node0", "replacement": True},
               {"t": 10.0, "event": "node_started", "node": "node1", "replacement": True}]
    assert explain_replacements(replacement_causes(events)) == (
        "3 node replacements: 1 after fault #0 (crash of node2, exit code -9); 1 after node0 exited by itself "
        "(exit code 1, no fault on it since its previous start); 1 after node1 exited by itself (exit code 1, no "
        "fault on it since its previous start)")
    assert explain_replacements([]) is None


TOY = """\
checks: {{golden: false}}
name: toy-report
cluster:
  mode: centralized
  nodes: 1
  node_restart: {{policy: on-failure, delay_s: 0.2, max_restarts: 10}}
workload:
  command: [python, {script}, "20"]
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
faults:
  - {{kind: crash, target: 0, at_step: 8}}
"""


@pytest.mark.usefixtures("no_leftovers")
def test_chaos_run_writes_report_html_and_prints_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real (toy) run through the command line: before, no HTML report existed until `chaos report --format
    html`, and the summary never said where one was."""
    (tmp_path / "s.yaml").write_text(TOY.format(script=BROKEN / "print_steps.py"))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "runs")]) == 0
    [run_dir] = (tmp_path / "runs").iterdir()
    report = run_dir / "report.html"
    assert report.is_file() and "<figure id=timeline>" in report.read_text()
    out = capsys.readouterr().out
    assert f"HTML report: {report}" in out
    assert "PASS held: completes (implicit)" in out and "recovery" in out and "no bound set" in out


@pytest.mark.usefixtures("no_leftovers")
def test_an_engine_without_matplotlib_gets_its_report_from_the_renderer(tmp_path: Path) -> None:
    """What `chaos run` does: the engine never imports matplotlib (~0.6 s after the job), the renderer it started
    at the launch draws report.html."""
    import subprocess
    import sys

    (tmp_path / "s.yaml").write_text(TOY.format(script=BROKEN / "print_steps.py"))
    code = f"""
import sys
from chaos.engine import Engine
from chaos.loading import load_scenario
result = Engine(load_scenario({str(tmp_path / "s.yaml")!r}), out_dir={str(tmp_path / "runs")!r}).run()
print(result["verdict"], "matplotlib" in sys.modules, result.run_dir)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    verdict, imported, run_dir = done.stdout.split()
    assert (verdict, imported) == ("pass", "False")
    assert "<figure id=timeline>" in (Path(run_dir) / "report.html").read_text()


@pytest.mark.usefixtures("no_leftovers")
def test_the_engine_draws_the_report_itself_when_its_renderer_dies(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A renderer that ends before it answers (here: one that exits at once) costs the run nothing: report.html
    is drawn by the engine, as before the renderer existed."""
    import sys

    from chaos.engine import Engine, core
    from chaos.loading import parse_scenario

    def start_one_that_exits(self: core.Renderer) -> None:
        import subprocess

        self._proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, bufsize=0)

    monkeypatch.setattr(core.Renderer, "saves_time", staticmethod(lambda: True))
    monkeypatch.setattr(core.Renderer, "start", start_one_that_exits)
    result = Engine(parse_scenario(TOY.format(script=BROKEN / "print_steps.py")), out_dir=tmp_path).run()
    assert result["verdict"] == "pass", result["why"]
    assert "<figure id=timeline>" in (result.run_dir / "report.html").read_text()


@pytest.mark.usefixtures("no_leftovers")
def test_a_report_that_fails_is_logged_and_never_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from chaos.engine import Engine, core
    from chaos.loading import parse_scenario
    from chaos.reports.renderer import RenderFailed

    def broken(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("no plots today")

    def renderer_gone(*args: object, **kwargs: object) -> None:
        raise RenderFailed("it ended (exit code 1)")

    # the renderer process cannot take it, so the engine draws the report itself, and that fails too
    monkeypatch.setattr(core.Renderer, "saves_time", staticmethod(lambda: True))
    monkeypatch.setattr(core.Renderer, "ask", renderer_gone)
    monkeypatch.setattr(core, "write_report", broken)
    with caplog.at_level(logging.WARNING, logger="chaos.engine.core"):
        result = Engine(parse_scenario(TOY.format(script=BROKEN / "print_steps.py")), out_dir=tmp_path).run()
    assert result["verdict"] == "pass", result["why"]
    assert (result.run_dir / "result.json").is_file() and not (result.run_dir / "report.html").exists()
    assert any("report.html not written (RuntimeError: no plots today)" in r.getMessage() for r in caplog.records)
    assert "HTML report:" not in result.table()
