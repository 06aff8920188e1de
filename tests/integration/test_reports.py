"""Reports from a fresh real run directory, in all four formats, recomputed from a copy of the directory alone.

The same and more (the report CLI, interval advice, the HTML report in headless Chromium, every recorded verdict)
run in the fast tier on recorded runs: tests/test_recorded_runs.py. This one keeps the reports honest against
what today's engine writes (the recordings are only as new as their last `python -m tests.data.record`)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.reports import write_report
from tests.runs import run_shipped

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]


@pytest.fixture
def copied_run(tmp_path: Path) -> Path:
    _, run_dir = run_shipped("centralized-crash")
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    for generated in ("result.json", "report.html"):
        (copy / generated).unlink(missing_ok=True)
    return copy


def test_all_formats_from_the_run_directory_alone(copied_run: Path) -> None:
    html = write_report(copied_run, "html").read_text()
    for section in ("Timeline", "Loss against the golden run", "Recovery breakdown", "Expectations",
                    "Checkpoint correctness", "Checkpoint interval", "Environment"):
        assert f">{section}<" in html, section
    assert "<script" not in html and "<link" not in html
    assert 'src="http' not in html and 'href="http' not in html and "url(http" not in html
    md_path = write_report(copied_run, "md")
    md = md_path.read_text()
    assert "![timeline](report-timeline.png)" in md and (copied_run / "report-timeline.png").stat().st_size > 1000
    data = json.loads(write_report(copied_run, "json").read_text())
    assert data["result"]["verdict"] == "pass" and data["recovery_breakdown"]
    suite = ET.parse(write_report(copied_run, "junit")).getroot()
    names = {c.get("name") for c in suite.iter("testcase")}
    assert {"completes", "recovery_s", "lost_steps", "digests_ok", "matches_golden", "exactly_once"} <= names
    assert suite.get("failures") == "0"
