"""Analysis, reports and compare on recorded real runs (tests/data/histories/, re-recorded by tests/data/record.py).

The histories are real: real torchrun jobs, real faults. What these tests check is what torch-chaos computes and
renders from a run directory alone, which needs no cluster; the integration tier still runs every scenario for
real and checks its verdict on the live run.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.run import analyze
from chaos.cli import main
from chaos.compare import write_comparison
from chaos.history import read_history
from chaos.reports import write_report
from tests.comparison import assert_centralized_vs_elastic
from tests.conftest import RECORDED_REPORTS_GROUP
from tests.data.record import RECORDINGS
from tests.data.recorded import expand, recorded_names

ARTIFACTS = Path(__file__).resolve().parents[1] / "reports" / "generated"

# One worker draws the recordings' reports and their comparison for this module and the others that read them
# (the session fixtures recorded_report and recorded_comparison, tests/conftest.py).
pytestmark = pytest.mark.xdist_group(RECORDED_REPORTS_GROUP)

DOCUMENTED_VERDICT = {
    "centralized-crash": "pass",
    "quickstart": "pass",
    "elastic-rendezvous-host-crash": "fail",
    "corrupt-latest-checkpoint": "pass",
    "non-atomic-save": "restart_loop",
    "network-delay-netns": "pass",
    "plain-ddp-crash": "pass",
    "plain-ddp-no-optimizer-state": "fail",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("recorded")
    return {name: expand(name, into) for name in recorded_names()}


@pytest.fixture(scope="module")
def centralized_html(recorded_report: Callable[[str, str], Path]) -> Path:
    """centralized-crash's report.html, drawn once for the tests that read it (here: the formats, Chromium)."""
    return recorded_report("centralized-crash", "html")


def test_every_recording_is_present_and_small() -> None:
    assert recorded_names() == sorted(RECORDINGS) == sorted(DOCUMENTED_VERDICT)
    total = sum(f.stat().st_size for f in Path(__file__).parent.joinpath("data", "histories").rglob("*") if f.is_file())
    assert total < 3_000_000, f"tests/data/histories holds {total} bytes: keep recordings small (no checkpoints)"


@pytest.mark.parametrize("name", sorted(DOCUMENTED_VERDICT))
def test_analysis_recomputes_the_documented_verdict(runs: dict[str, Path], name: str) -> None:
    result = analyze(runs[name])
    assert result["verdict"] == DOCUMENTED_VERDICT[name], result["why"]
    assert result["faults"] and all(f["mechanism"] for f in result["faults"])


def test_crash_replaced_node_is_measured(runs: dict[str, Path]) -> None:
    result = analyze(runs["quickstart"])
    [fault] = result["faults"]
    assert fault["kind"] == "crash" and fault["restarted"] and result["node_replacements"] == 1
    assert 0 < fault["recovery_s"] < 30 and 0 <= fault["lost_steps"] <= 50
    assert fault["resumed_from"] % 50 == 0 and fault["catch_up_s"] >= fault["recovery_s"]
    assert all(v["ok"] is True for v in result["checkpoint"].values()), result["checkpoint"]
    golden = result["checkpoint"]["matches_golden"]
    assert golden["mode"] == ("within_tolerance" if golden["world_size_changed"] else "bitwise"), golden


def test_store_loss_fails_the_completes_expectation(runs: dict[str, Path]) -> None:
    result = analyze(runs["elastic-rendezvous-host-crash"])
    assert result["end_reason"] == "failed"
    completes = next(x for x in result["expectations"] if x["name"] == "completes")
    assert completes["value"] is False and not completes["ok"]


def test_rejected_checkpoint_and_non_disruptive_fault(runs: dict[str, Path]) -> None:
    result = analyze(runs["corrupt-latest-checkpoint"])
    corrupt, crash = result["faults"]
    assert corrupt["kind"] == "corrupt_checkpoint" and crash["kind"] == "crash"
    assert crash["resumed_from"] == 250
    assert result["checkpoint"]["digests_ok"]["ok"] is True


def test_torn_checkpoint_is_a_restart_loop_caught_by_digests(runs: dict[str, Path]) -> None:
    result = analyze(runs["non-atomic-save"])
    assert result["checkpoint"]["digests_ok"]["verdict"] == "loaded_corrupt"


def test_impairment_slowdown_without_restart(runs: dict[str, Path]) -> None:
    result = analyze(runs["network-delay-netns"])
    [fault] = result["faults"]
    assert not fault["restarted"] and fault["slowdown"] > 2
    [healed] = [e for e in read_history(runs["network-delay-netns"] / "events.jsonl")
                if e.get("event") == "fault_healed"]
    assert healed["restored"] is True


def test_all_report_formats_from_the_run_directory_alone(runs: dict[str, Path], centralized_html: Path) -> None:
    run_dir = runs["centralized-crash"]
    html = centralized_html.read_text()
    for section in ("Timeline", "Loss against the golden run", "Recovery breakdown", "Expectations",
                    "Checkpoint correctness", "Checkpoint interval", "Environment"):
        assert f">{section}<" in html, section
    assert "<script" not in html and "<link" not in html
    assert 'src="http' not in html and 'href="http' not in html and "url(http" not in html
    md = write_report(run_dir, "md").read_text()
    assert "![timeline](report-timeline.png)" in md and (run_dir / "report-timeline.png").stat().st_size > 1000
    data = json.loads(write_report(run_dir, "json").read_text())
    assert data["result"]["verdict"] == "pass" and data["recovery_breakdown"]
    suite = ET.parse(write_report(run_dir, "junit")).getroot()
    names = {c.get("name") for c in suite.iter("testcase")}
    assert {"completes", "recovery_s", "lost_steps", "digests_ok", "matches_golden", "exactly_once"} <= names
    assert suite.get("failures") == "0"


@pytest.mark.parametrize("name", ["elastic-rendezvous-host-crash", "non-atomic-save", "network-delay-netns",
                                  "corrupt-latest-checkpoint"])
def test_every_recording_renders_in_every_format(recorded_report: Callable[[str, str], Path], name: str) -> None:
    """Every verdict (fail, restart_loop; pass is the test above) and fault kind recorded (an impairment, a
    non-disruptive corruption) goes through every report path without an error."""
    for fmt in ("html", "md", "json", "junit"):
        assert recorded_report(name, fmt).stat().st_size > 0


def test_report_cli_and_interval_advice(runs: dict[str, Path]) -> None:
    run_dir = runs["centralized-crash"]
    out = run_dir / "advice.md"
    assert main(["report", str(run_dir), "--format", "md", "-o", str(out), "--mtbf", "2h"]) == 0
    text = out.read_text()
    assert "Young √(2CM)" in text and "Daly" in text and "Expected goodput" in text
    assert main(["report", str(run_dir / "nope")]) == 2
    assert main(["report", str(runs["elastic-rendezvous-host-crash"]), "--format", "json"]) == 1


def test_centralized_against_elastic(recorded_comparison: dict[str, Path]) -> None:
    assert_centralized_vs_elastic(recorded_comparison)


def test_html_report_in_headless_chromium(chromium_views: dict[str, Any]) -> None:
    """The report as Chromium showed it (opened by the session fixture ``chromium_views``, tests/conftest.py, in
    the browser that also opens the comparison page); its screenshot is kept in reports/generated for CI."""
    view = chromium_views["report"]
    assert len(view["plot_boxes"]) == 2
    for box, paths in zip(view["plot_boxes"], view["plot_paths"], strict=True):
        assert box is not None and box["width"] > 300 and box["height"] > 150
        assert paths > 10, "a plot with nothing drawn in it"
    assert view["banner"] is not None and "PASS" in view["banner"]
    assert view["failed"] == []
    assert view["requests"] == [view["uri"]], "the report must load nothing but itself"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(view["screenshot"], ARTIFACTS / "report-screenshot.png")
    assert (ARTIFACTS / "report-screenshot.png").stat().st_size > 10_000


def test_two_runs_of_one_scenario_keep_a_report_each(runs: dict[str, Path], tmp_path: Path) -> None:
    """Each run's report was named after its scenario: the second of two cluster shapes of one file overwrote the
    first, and both columns linked the same page. (plain-ddp-crash: the smallest distributed recording, 200
    events; any scenario shows it.)"""
    import shutil

    twin = tmp_path / "plain-ddp-crash-twin"
    shutil.copytree(runs["plain-ddp-crash"], twin)
    paths = write_comparison([runs["plain-ddp-crash"], twin], tmp_path / "cmp")
    assert sorted(p.name for p in (tmp_path / "cmp").glob("*.html") if p.name != "compare.html") == sorted(
        [f"{runs['plain-ddp-crash'].name}.html", "plain-ddp-crash-twin.html"])
    assert paths["md"].read_text().count(".html)") == 2
    assert paths["md"].read_text().startswith("# torch-chaos comparison: 2 distributed runs\n"), "not 'vs centralized'"


def test_compare_refuses_a_run_given_twice_or_two_runs_of_one_name(runs: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 recorded_comparison: dict[str, Path]) -> None:
    quickstart = runs["quickstart"]
    same_name = tmp_path / "elsewhere" / quickstart.name
    shutil.copytree(quickstart, same_name)
    for dirs, said in (([quickstart, quickstart], "is given twice"), ([quickstart, same_name], "same name")):
        code = main(["compare", "--from-runs", *map(str, dirs), "-o", str(tmp_path / "cmp")])
        assert code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()
    # runs of two names are compared (the same pair, drawn once for the session)
    assert "comparison: distributed vs centralized</h1>" in recorded_comparison["html"].read_text()
