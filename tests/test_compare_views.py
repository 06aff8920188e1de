"""What a reviewer sees in ``chaos compare`` (issue 35, item 4), on the recorded centralized-crash and quickstart
runs: short column names with one legend, plots, links relative to the page, a ranking on time to result."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RECORDED_REPORTS_GROUP

# One worker draws the comparison for every test here and tests/test_recorded_runs.py's that read it (the
# session fixture recorded_comparison, tests/conftest.py), not once per xdist worker.
pytestmark = pytest.mark.xdist_group(RECORDED_REPORTS_GROUP)


@pytest.fixture(scope="module")
def compared(recorded_comparison: dict[str, Path]) -> dict[str, Path]:
    return recorded_comparison


def test_columns_have_short_names_and_one_legend(compared: dict[str, Path]) -> None:
    data = json.loads(compared["json"].read_text())
    assert data["legend"] == {"centralized-crash": "centralized-crash (centralized, 1×1)",
                              "quickstart": "quickstart (elastic, 3×1, tuned)"}
    md, html = compared["md"].read_text(), compared["html"].read_text()
    for label in data["legend"].values():  # each long label once: in the legend
        assert md.count(label) == 1 and html.count(label) == 1, label
    assert "|  | centralized-crash | quickstart |" in md
    assert not any("(centralized, 1×1)" in line for line in data["conclusions"])


def test_links_are_relative_to_the_page(compared: dict[str, Path]) -> None:
    """Run links were absolute paths of the machine that made the page: dead anywhere else."""
    page = compared["md"].parent
    md, html, text = compared["md"].read_text(), compared["html"].read_text(), compared["json"].read_text()
    for col in json.loads(text)["columns"]:
        assert col["run_dir"].startswith("../") and (page / col["run_dir"]).is_dir()
        assert f"`{col['run_dir']}`" in md and f"<code>{col['run_dir']}</code>" in html
    home = str(page.resolve().parent.parent)
    assert home not in md and home not in html and home not in text
    for href in re.findall(r"href='([^']+)'", html) + re.findall(r"\]\(([^)]+)\)", md):
        assert not os.path.isabs(href) and (page / href).exists(), href


def test_the_page_has_plots(compared: dict[str, Path]) -> None:
    html = compared["html"].read_text()
    for name in ("result", "throughput", "recovery"):
        figure = html.split(f"<figure id=plot-{name}>")[1].split("</figure>")[0]
        assert figure.startswith("<svg") and figure.count("<path") > 10, name
        assert (compared["md"].parent / f"compare-{name}.svg").stat().st_size > 5000
        assert f"![{name}](compare-{name}.svg)" in compared["md"].read_text()
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")


def test_conclusions_rank_on_time_to_result(compared: dict[str, Path]) -> None:
    lines = json.loads(compared["json"].read_text())["conclusions"]
    assert lines[1].startswith("Ranked by time to result (wall time from the start to the last step, faults "
                               "included): centralized-crash finished the same 600 steps in 4.4 s, 4.1× faster "
                               "than quickstart (17.8 s)")
    assert lines[2].startswith("To the result, centralized-crash held 1 node × 4.4 s = 4.4 node-seconds, "
                               "quickstart held 3 nodes × 17.8 s = 53.5 node-seconds")
    goodput = next(line for line in lines if line.startswith("Goodput"))
    assert "highest on quickstart (0.42), yet centralized-crash finished first" in goodput


def test_the_compare_page_in_headless_chromium(chromium_views: dict[str, Any]) -> None:
    """The page as Chromium showed it (opened by the session fixture ``chromium_views``, tests/conftest.py, in
    the browser that also opens the recorded report)."""
    view = chromium_views["compare"]
    assert len(view["plot_boxes"]) == 3
    for box in view["plot_boxes"]:
        assert box is not None and box["width"] > 300 and box["height"] > 100
    assert view["legend_rows"] == 2
    assert view["requests"] == [view["uri"]], "the page must load nothing but itself"
