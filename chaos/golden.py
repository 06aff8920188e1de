"""Golden runs: the same workload and cluster shape without faults, cached by what affects the numbers.

A faulted run is only "correct" if it ends where a fault-free run ends. The golden run is that reference. It is
cached by content in the user's cache directory (``$TORCH_CHAOS_GOLDEN_CACHE``, else
``$XDG_CACHE_HOME/torch-chaos/golden``, else ``~/.cache/torch-chaos/golden``) under ``<key>/``, where the key hashes
the workload (code and arguments that affect the numbers), the cluster shape (world size and mode decide the
floating-point summation order) and the torch version: a suite of scenarios on the same job, across runs, pytest
sessions and output directories, pays for it once. A lock file per key makes two concurrent runs that need the
same golden run compute it once (the second waits, then reuses it).

A golden run that restarted (a worker crashed, even after the job had finished) is not a trustworthy reference:
it is run once more, and if that one restarts too its summary says ``trusted: false`` and is not cached.

This module runs nothing itself: the caller passes how to run a scenario (the engine passes itself), so the
golden cache does not import the engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from chaos.analysis.checkpoints import golden_summary
from chaos.history import read_history
from chaos.plan import SHIPPED_WORKLOADS
from chaos.scenario import Checks, CommandWorkload, Expect, NodeRestart, Scenario

CACHE_ENV = "TORCH_CHAOS_GOLDEN_CACHE"
SUMMARY_FILE = "golden.json"
ATTEMPTS = 2  # a golden run that restarted is run once more, not until it happens to be clean

# Arguments of the shipped workload that change how and when it saves or breaks, never what a fault-free run
# computes (the planted bugs only act on resume), so they stay out of the key.
NUMERICALLY_NEUTRAL_ARGS = {"checkpoint_dir", "checkpoint_every", "keep", "bug", "pg_timeout_s", "step_time_ms"}

# Runs a scenario with its run directory under the given directory; returns that run directory (which holds
# events.jsonl and result.json once it returns).
ScenarioRunner = Callable[[Scenario, Path], Path]
# What the engine calls for a scenario's golden summary (a GoldenCache, or a stand-in in tests).
GoldenRunner = Callable[[Scenario], dict[str, Any]]


def wants_golden(scenario: Scenario) -> bool:
    if not scenario.checks.golden:
        return False
    w = scenario.workload
    return not isinstance(w, CommandWorkload) or "loss" in re.compile(w.progress_regex).groupindex


def torch_version() -> str | None:
    """torch's version from its installed metadata: importing torch for a string costs ~1.5 s of CPU."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - torch is a dependency
        return None


def golden_key(scenario: Scenario) -> str:
    w = scenario.workload
    c = scenario.cluster
    if isinstance(w, CommandWorkload):
        workload: dict[str, Any] = {"command": w.command, "progress_regex": w.progress_regex}
        script = next((Path(a) for a in w.command if a.endswith(".py") and Path(a).is_file()), None)
    else:
        workload = {"name": w.name, "args": {k: v for k, v in sorted(w.args.items())
                                             if k not in NUMERICALLY_NEUTRAL_ARGS}}
        script = SHIPPED_WORKLOADS[w.name]
    if script is not None:
        workload["code_sha256"] = hashlib.sha256(script.read_bytes()).hexdigest()
    material = {"workload": workload, "mode": c.mode, "world_size": c.nodes * c.procs_per_node,
                "threads": c.threads_per_proc, "torch": torch_version()}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def golden_scenario(scenario: Scenario) -> Scenario:
    return scenario.model_copy(deep=True, update={
        "name": f"{scenario.name}-golden", "faults": [], "expect": Expect(), "checks": Checks(golden=False),
        # Local processes: the reference numbers do not depend on where nodes run (a container runs the same torch
        # build), and a fault-free run needs no network of its own.
        "cluster": scenario.cluster.model_copy(update={"node_restart": NodeRestart(policy="never"),
                                                       "runtime": "local"}),
    })


def default_cache_dir() -> Path:
    """``$TORCH_CHAOS_GOLDEN_CACHE``, else ``$XDG_CACHE_HOME/torch-chaos/golden``, else ``~/.cache/...``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "torch-chaos" / "golden"


@contextlib.contextmanager
def _locked(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: released when the holder's file is closed, even if it is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(f"waiting for another run computing the same golden run ({path.stem})")
            fcntl.flock(f, fcntl.LOCK_EX)  # until the other process is done; then its result is reused
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def restarts_of(result: dict[str, Any]) -> int:
    """Worker restarts of a fault-free run, during training or after the job had finished."""
    return int(result.get("restarts") or 0) + int(result.get("restarts_after_completion") or 0)


class GoldenCache:
    """The golden summary of a scenario's workload, from the cache or from a new golden run (then cached)."""

    def __init__(self, run_scenario: ScenarioRunner, directory: Path | None = None,
                 on_wait: Callable[[str], None] | None = None):
        self.run_scenario = run_scenario
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.on_wait = on_wait  # told when another process holds the key's lock (the wait can be a minute)

    def __call__(self, scenario: Scenario) -> dict[str, Any]:
        key = golden_key(scenario)
        home = self.directory / key
        summary_path = home / SUMMARY_FILE
        with _locked(self.directory / f"{key}.lock", self.on_wait):
            if summary_path.exists():
                summary = json.loads(summary_path.read_text())
                summary["cached"] = True
                return summary
            home.mkdir(parents=True, exist_ok=True)
            summary = self._compute(golden_scenario(scenario), home)
            summary["key"] = key
            if summary["completed"] and summary["trusted"]:  # a failed or untrusted golden run is not cached
                tmp = home / f".{SUMMARY_FILE}.tmp"
                tmp.write_text(json.dumps(summary))
                os.replace(tmp, summary_path)
            return summary

    def _compute(self, scenario: Scenario, home: Path) -> dict[str, Any]:
        tried: list[str] = []
        for _ in range(ATTEMPTS):
            run_dir = self.run_scenario(scenario, home)
            summary = golden_summary(read_history(run_dir / "events.jsonl"))
            summary.update(run_dir=str(run_dir), cached=False, trusted=True)
            result_path = run_dir / "result.json"
            result = json.loads(result_path.read_text()) if result_path.exists() else {}
            restarts = restarts_of(result)
            if not summary["completed"] or restarts == 0:
                if tried:
                    summary["retried_after"] = tried
                break  # a failed golden run is reported as such; running it again would not make it a reference
            tried.append(f"{run_dir.name} restarted {restarts} time(s)")
            summary.update(trusted=False, untrusted_why=f"the fault-free run restarted: {'; '.join(tried)}")
        return summary
