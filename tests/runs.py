"""Running shipped scenarios once per test session (each is a real cluster run of about a minute)."""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.engine import Engine
from chaos.loading import load_scenario, resolve_scenario_path
from chaos.scenario import Scenario

RUNS_ROOT = Path(tempfile.mkdtemp(prefix="torch-chaos-tests-"))


@functools.cache
def run_shipped(name: str) -> tuple[dict[str, Any], Path]:
    """The result and run directory of a shipped scenario, run once per session."""
    scenario = load_scenario(resolve_scenario_path(name))
    return run_scenario(scenario)


def run_scenario(scenario: Scenario) -> tuple[dict[str, Any], Path]:
    engine = Engine(scenario, out_dir=RUNS_ROOT)
    result = engine.run()
    return result, engine.run_dir


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
