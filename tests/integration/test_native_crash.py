"""The shipped native-crash scenarios (``scenarios/process/segfault.yaml``, ``abort.yaml``), run for real on the
local runtime: a worker killed by SIGSEGV or SIGABRT, reported by its torchrun agent with that exit code (not the
-9 of a SIGKILL), its group restarted and resumed from the last checkpoint.

The same kinds run in the gate inside the docker tour (segfault); these give each kind a scenario of its own."""

from __future__ import annotations

import pytest

from tests.runs import run_shipped, steps_run
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

EXIT_CODE = {"process/segfault": (-11, "SIGSEGV"), "process/abort": (-6, "SIGABRT")}
EXPECTED_VERDICT = dict.fromkeys(EXIT_CODE, "pass")


@pytest.mark.parametrize("name", sorted(EXIT_CODE))
def test_the_worker_dies_of_its_signal_and_the_group_resumes(name: str) -> None:
    result, run_dir = run_shipped(name)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    code, signal_name = EXIT_CODE[name]
    [fault] = result["faults"]
    assert fault["injected"] and signal_name in fault["mechanism"], fault
    assert fault["restarted"] and 0 < fault["recovery_s"] < 180 and 0 <= fault["lost_steps"] <= 50, fault
    assert result["steps_completed"] == steps_run(name)
    log = (run_dir / "logs" / "node1.log").read_text(errors="replace")
    assert f"exitcode: {code})" in log, f"node1's agent did not report exit code {code}: {run_dir}"
