"""Nodes per host (issue 36): 32 elastic nodes on one machine pass with the default (tuned) settings, whose
rendezvous timeouts grow with the node count (chaos.plan.scaled_for_nodes). Heavy (64 Python processes that import
torch): ``full`` only, and alone on the machine (the machine lock)."""

from __future__ import annotations

import pytest

from tests.runs import run_shipped
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

EXPECTED_VERDICT = {"scale/nodes-32": "pass"}


@FULL
@pytest.mark.parametrize("name", sorted(EXPECTED_VERDICT))
def test_32_nodes_recover_from_a_crash_with_the_default_settings(name: str) -> None:
    result, run_dir = run_shipped(name)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    assert result["steps_completed"] == 120
    [crash] = result["faults"]
    assert crash["kind"] == "crash" and crash["recovery_s"] is not None and crash["recovery_s"] > 0, crash
