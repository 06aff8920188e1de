"""What a centralized-vs-elastic comparison must show, on recorded runs (fast tier) and on fresh ones alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def assert_centralized_vs_elastic(paths: dict[str, Path]) -> None:
    """Every cell measured, the conclusions derived from those cells, every format written."""
    data = json.loads(paths["json"].read_text())
    c, e = data["columns"]
    assert c["mode"] == "centralized" and e["mode"] == "elastic"
    for col in (c, e):
        for key in ("steps_per_s", "samples_per_s", "time_to_first_step_s", "recovery_s", "goodput",
                    "node_seconds_per_step", "comm_share"):
            assert col[key] is not None and col[key] >= 0, (col["label"], key)
    assert c["comm_share"] == 0, "a single process does not communicate"
    assert 0 < e["comm_share"] < 1
    # the measured samples/s follow from the global batch of the shipped workload (48 samples per step)
    assert c["samples_per_s"] == pytest.approx(48 * c["steps_per_s"], rel=1e-6)
    faster = max((c, e), key=lambda col: col["steps_per_s"])
    assert any(line.startswith(f"{faster['short']} is the fastest") for line in data["conclusions"])
    # short names in the bullets, each long label once, in the legend
    assert data["legend"] == {col["short"]: col["label"] for col in (c, e)}
    assert not any(col["label"] in line for col in (c, e) for line in data["conclusions"])
    # ranked on time to result, the first to finish named first
    first = min((c, e), key=lambda col: col["time_to_result_s"])
    assert data["conclusions"][1].startswith("Ranked by time to result") and f": {first['short']} finished" in \
        data["conclusions"][1]
    # every column says what its nodes had, and the first conclusion says whether the comparison is fair
    assert all(col["resources"] is None or "cpus_per_node" in col["resources"] for col in (c, e))
    assert data["conclusions"][0].startswith(("Not a fair comparison: ", "A fair comparison: "))
    md = paths["md"].read_text()
    for col in (c, e):  # each run's own report beside the comparison, linked under its run directory's name
        own = f"{Path(col['run_dir']).name}.html"
        assert (paths["md"].parent / own).exists() and f"]({own})" in md, own
        # the run directory relative to the page, never the absolute path of the machine that made it
        assert not Path(col["run_dir"]).is_absolute() and (paths["md"].parent / col["run_dir"]).is_dir()
        assert str((paths["md"].parent / col["run_dir"]).resolve()) not in md + paths["html"].read_text()
    assert "| communication share of a step (median) |" in md and "## Conclusions" in md
    assert "| resources per node |" in md and "| fair comparison |" in md and "| final loss (global batch 48) |" in md
    html = paths["html"].read_text()
    assert "<table" in html and html.count("<figure") >= 3 and "<script" not in html
    assert "![throughput](compare-throughput.svg)" in md and (paths["md"].parent / "compare-throughput.svg").exists()
