"""Flower's own compare page from real runs: ``chaos compare scenarios/compare/flower-*.yaml`` runs the four
federated runs (fault-free, client crash, client straggler, supervised server restart) and writes the page with
rounds instead of steps; the same runs compared beside a recorded step-based run go to their own page, linked
from the step page. Waits for ``--full`` (the page's logic is tested on synthetic histories in the fast tier,
tests/test_compare_rounds.py); needs ``flwr``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.plan import REPO_ROOT
from tests.data.recorded import expand
from tests.integration.test_flower_launcher import chaos_env
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL,
              pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                                 reason='flwr is not installed (pip install "torch-chaos[flower]")')]

# the shipped scenarios this test runs, by name under scenarios/ (tests/test_suite_coverage.py)
EXPECTED_VERDICT = {"compare/flower-fault-free": "pass", "compare/flower-client-crash": "pass",
                    "compare/flower-client-straggler": "pass", "compare/flower-server-restart": "pass"}


def _chaos(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], env=chaos_env(tmp), capture_output=True,
                          text=True, timeout=1200)


def test_flower_runs_compared_by_rounds_and_kept_off_the_step_table(tmp_path: Path) -> None:
    files = [str(REPO_ROOT / "scenarios" / f"{name}.yaml") for name in EXPECTED_VERDICT]
    done = _chaos(["compare", "--out", str(tmp_path / "runs"), "-o", str(tmp_path / "page"), *files], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    page = json.loads((tmp_path / "page" / "compare.json").read_text())
    assert page["unit"] == "round"
    cols = {c["scenario"]: c for c in page["columns"]}
    assert {f"compare-{n.split('/')[1]}": v for n, v in EXPECTED_VERDICT.items()} == {
        n: c["verdict"] for n, c in cols.items()}
    for col in cols.values():
        assert col["rounds_completed"] == col["rounds_planned"] == 6 and col["rounds_lost"] == 0, col
        assert col["final_accuracy"] is not None and col["time_to_result_s"] is not None, col
    for name in ("compare-flower-client-crash", "compare-flower-client-straggler", "compare-flower-server-restart"):
        assert cols[name]["to_next_round_s"] is not None and cols[name]["to_next_round_s"] > 0, cols[name]
    assert cols["compare-flower-server-restart"]["rounds_redone"] == 0  # resumed from its saved global model
    assert any("vs fault-free" in s for s in page["conclusions"]), page["conclusions"]
    html = (tmp_path / "page" / "compare.html").read_text()
    assert "<table id=rounds>" in html and "not measured" not in html

    runs = sorted((tmp_path / "runs").iterdir())
    step_run = expand("centralized-crash", tmp_path / "recorded")
    mixed = _chaos(["compare", "--from-runs", str(step_run), *map(str, runs), "-o", str(tmp_path / "mixed")],
                   tmp_path)
    assert mixed.returncode == 0, mixed.stderr[-3000:]
    main = json.loads((tmp_path / "mixed" / "compare.json").read_text())
    assert [c["mode"] for c in main["columns"]] == ["centralized"], main["columns"]
    assert main["rounds_page"] == "flower/compare.html"
    rounds = json.loads((tmp_path / "mixed" / "flower" / "compare.json").read_text())
    assert len(rounds["columns"]) == 4 and rounds["unit"] == "round"
