"""The recorded histories (tests/data/histories/) are still what today's engine writes: the gate's fresh runs of
the same scenarios (shared with test_shipped_scenarios.py, no run of its own) give the recordings' verdicts, faults
and result.json fields.

The fast tier tests analysis, verdicts and reports on the recordings instead of on real runs; this is what keeps
that honest. When it fails, re-record (``python -m tests.data.record NAME``, tests/data/record.py) and look at
what changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.data.record import RECORDINGS
from tests.data.recorded import RECORDED
from tests.runs import TEST_STEPS, run_shipped

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

# Recordings of the runs the gate makes anyway: the same scenario, runtime and steps as run_shipped's.
SHARED = [name for name, (scenario, runtime, steps, _) in RECORDINGS.items()
          if name in ("quickstart", "centralized-crash") and runtime is None and steps == TEST_STEPS.get(scenario)]


def outcome(result: dict[str, Any]) -> dict[str, Any]:
    """What a re-recording must reproduce: verdicts and what the faults did, not timings (noisy on 2 cores)."""
    return {
        "verdict": result["verdict"], "end_reason": result["end_reason"],
        "steps_completed": result["steps_completed"], "node_replacements": result["node_replacements"],
        "checkpoint": {name: (v["ok"], v.get("verdict")) for name, v in result["checkpoint"].items()},
        "faults": [(f["kind"], f["target"], f["injected"], f["restarted"], f["resumed_from"])
                   for f in result["faults"]],
    }


def fields(result: dict[str, Any]) -> dict[str, set[str]]:
    return {"result.json": set(result), "faults": {k for f in result["faults"] for k in f}}


def test_the_shared_runs_are_recorded() -> None:
    assert SHARED == ["centralized-crash", "quickstart"], SHARED


@pytest.mark.parametrize("name", SHARED)
def test_a_fresh_run_reproduces_the_recording(name: str) -> None:
    recorded = json.loads((RECORDED / name / "result.json").read_text())
    fresh, run_dir = run_shipped(RECORDINGS[name][0])
    assert outcome(fresh) == outcome(recorded), (run_dir, RECORDED / name)
    assert fields(fresh) == fields(recorded), (
        "result.json's fields changed since the recording: re-record (python -m tests.data.record) "
        f"{name}", run_dir)
