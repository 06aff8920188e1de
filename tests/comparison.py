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
    assert any(line.startswith(f"{faster['label']} is the fastest") for line in data["conclusions"])
    # every column says what its nodes had, and the first conclusion says whether the comparison is fair
    assert all(col["resources"] is None or "cpus_per_node" in col["resources"] for col in (c, e))
    assert data["conclusions"][0].startswith(("Not a fair comparison: ", "A fair comparison: "))
    md = paths["md"].read_text()
    for col in (c, e):  # each run's own report beside the comparison, linked under its run directory's name
        own = f"{Path(col['run_dir']).name}.html"
        assert (paths["md"].parent / own).exists() and f"]({own})" in md, own
    assert "| communication share of a step (median) |" in md and "## Conclusions" in md
    assert "| resources per node |" in md and "| fair comparison |" in md and "| final loss (global batch 48) |" in md
    assert "<table>" in paths["html"].read_text()
