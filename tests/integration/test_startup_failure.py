"""An elastic job whose workers die before their first step: torchrun restarts them again and again, and only its
log says so. torch-chaos reads that log and ends the run as a failed start, with the workers' own last lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.engine import Engine
from chaos.loading import parse_scenario
from tests.tiers import FULL

BROKEN = Path(__file__).resolve().parents[1] / "broken"

# The whole file waits for --full.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]


def test_elastic_job_that_cannot_start(tmp_path: Path) -> None:
    scenario = parse_scenario(f"""\
name: cannot-start
cluster: {{nodes: 2}}
workload:
  command: [python, {BROKEN / 'fails_at_start.py'}]
  progress_regex: 'step (?P<step>\\d+)'
checks: {{golden: false}}
limits: {{startup_timeout_s: 300, deadline_s: 300}}
""")
    result = Engine(scenario, out_dir=tmp_path).run()
    assert result["verdict"] == "error" and result["end_reason"] == "failed_to_start", result["why"]
    assert "worker failure(s), exit code(s) [1]" in result["why"]
    assert "No such file or directory: 'data/train.csv'" in result["why"]
    assert result["duration_s"] < 200  # long before the startup timeout
