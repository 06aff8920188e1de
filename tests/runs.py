"""Real cluster runs for the integration tests: each distinct run once per test session.

Where a workload's length proves nothing, tests run a shipped scenario shorter than shipped (``steps=``): the
fault, its step and the checkpoint interval stay as documented, only the tail of training after recovery is cut.
All shortened three-node runs use the same step count so that they share one golden run (the golden cache keys on
the workload's arguments, see chaos/golden.py); process/memory-pressure, whose workers hold more data, has its own.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.engine import Engine
from chaos.loading import load_scenario, resolve_scenario_path
from chaos.scenario import Scenario


@functools.cache
def runs_root() -> Path:
    """Where this session's shared runs go: the directory the session's controller made (``TORCH_CHAOS_TEST_RUNS``,
    tests/conftest.py), removed after a session that passed and kept, its path printed, after one with a failure
    or a rerun; a fresh one where no pytest session made it (this module used alone)."""
    made = os.environ.get("TORCH_CHAOS_TEST_RUNS")
    if made:
        Path(made).mkdir(parents=True, exist_ok=True)
        return Path(made)
    return Path(tempfile.mkdtemp(prefix="torch-chaos-tests-"))


# Faults land at step 200-330 and recovery needs well under 150 steps; 600 leaves every documented figure (resume
# step, lost steps, catch-up, the world size after a replacement) as in the shipped 1000- and 800-step runs.
SHORT_STEPS = 600
# The shipped scenarios the integration tests run shorter, and how long. Not here, run as shipped: elastic-freeze
# (1000: the thawed node must be back in the group before the end), network/delay and network/bandwidth (600
# already), the planted bugs (400 steps of 4 ms already; their documented steps are what they test).
TEST_STEPS = {name: SHORT_STEPS for name in (
    "quickstart", "elastic-worker-crash", "elastic-node-crash-no-replace", "elastic-rendezvous-host-crash",
    "elastic-dedicated-store-node-crash", "elastic-default-timeouts", "centralized-crash",
    "crash-during-checkpoint-save", "corrupt-latest-checkpoint", "network/isolate", "network/partial-partition",
    "process/oom-kill", "process/memory-pressure", "process/segfault", "process/abort")}


def shipped(name: str, runtime: str | None = None, steps: int | None = None) -> Scenario:
    """A shipped scenario, optionally on another runtime (as ``chaos run NAME --runtime``) and with fewer steps."""
    scenario = load_scenario(resolve_scenario_path(name), runtime=runtime)
    if steps is not None:
        scenario.workload.args["steps"] = steps  # type: ignore[union-attr]
    return scenario


def steps_run(name: str) -> int:
    """The step count a shipped scenario is run with by the integration tests (TEST_STEPS, else as shipped)."""
    return TEST_STEPS.get(name) or shipped(name).workload.args["steps"]  # type: ignore[union-attr]


def run_shipped(name: str, runtime: str | None = None) -> tuple[dict[str, Any], Path]:
    """The result and run directory of a shipped scenario on a runtime (None: the file's), once per session.

    Run with TEST_STEPS: every test that asks for the same scenario and runtime shares the one real run."""
    return _shared(json.dumps(["shipped", name, runtime]),
                   lambda: run_scenario(shipped(name, runtime, TEST_STEPS.get(name))))


def run_scenario(scenario: Scenario) -> tuple[dict[str, Any], Path]:
    engine = Engine(scenario, out_dir=runs_root())
    result = engine.run()
    return result, engine.run_dir


# Every shared run of this session (each xdist worker has its own), by key: run_shipped's (scenario, runtime)
# and run_once's scenario content.
_SAME_RUNS: dict[str, tuple[dict[str, Any], Path]] = {}


def run_once(scenario: Scenario) -> tuple[dict[str, Any], Path]:
    """Like run_scenario, but a scenario identical to one already run (apart from its name) is not run again.

    For tests that build the same scenario from different files (the correct workload of several planted-bug
    scenarios is one and the same job), never for tests whose point is repetition."""
    key = json.dumps(scenario.model_dump(mode="json", exclude={"name", "description"}), sort_keys=True)
    return _shared(key, lambda: run_scenario(scenario))


def _shared(key: str, make: Callable[[], tuple[dict[str, Any], Path]]) -> tuple[dict[str, Any], Path]:
    """The session's one run for ``key``, made on first use; the current test is noted as its user."""
    USED_BY_CURRENT_TEST.add(key)
    if key not in _SAME_RUNS:
        _SAME_RUNS[key] = make()
    return _SAME_RUNS[key]


# The shared runs the current test asked for (tests/conftest.py empties it as a test starts and keeps it with the
# test): a failed test's rerun must make its runs again, not be handed the very run it failed on.
USED_BY_CURRENT_TEST: set[str] = set()


def forget(keys: set[str]) -> None:
    """Drop these shared runs, so the next test that asks for one makes it afresh (a rerun after a failure)."""
    for key in keys:
        _SAME_RUNS.pop(key, None)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
