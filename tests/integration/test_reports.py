"""Reports from a real run directory, in all four formats, recomputed from a copy of the directory alone; the HTML
report rendered in a real headless Chromium with no failed request and every plot present."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.reports import write_report
from tests.runs import run_shipped

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

ARTIFACTS = Path(__file__).resolve().parents[2] / "reports" / "generated"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def copied_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, run_dir = run_shipped("centralized-crash")
    copy = tmp_path_factory.mktemp("report") / run_dir.name
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


def test_report_cli_and_interval_advice(copied_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = copied_run / "advice.md"
    assert main(["report", str(copied_run), "--format", "md", "-o", str(out), "--mtbf", "2h"]) == 0
    text = out.read_text()
    assert "Young √(2CM)" in text and "Daly" in text and "Expected goodput" in text
    assert main(["report", str(copied_run / "nope")]) == 2


def test_html_report_in_headless_chromium(copied_run: Path) -> None:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install -y chromium); CI must run the browser test")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    report = write_report(copied_run, "html")
    requests: list[str] = []
    failed: list[str] = []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900}, java_script_enabled=False)
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(report.as_uri())
            plots = page.locator("figure svg")
            assert plots.count() == 2
            for i in range(plots.count()):
                box = plots.nth(i).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 150
                assert plots.nth(i).locator("path").count() > 10, "a plot with nothing drawn in it"
            assert "PASS" in page.locator(".banner").inner_text()
            page.screenshot(path=str(ARTIFACTS / "report-screenshot.png"), full_page=True)
        finally:
            browser.close()
    assert failed == []
    assert requests == [report.as_uri()], "the report must load nothing but itself"
    assert (ARTIFACTS / "report-screenshot.png").stat().st_size > 10_000
