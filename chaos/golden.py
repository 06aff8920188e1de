"""Golden runs: the same workload and cluster shape without faults, cached by what affects the numbers.

A faulted run is only "correct" if it ends where a fault-free run ends. The golden run is that reference; it is
cached under ``<out>/golden/<key>/`` where the key hashes the workload (code and arguments that affect the
numbers), the cluster shape (world size and mode decide the floating-point summation order) and the torch
version, so a suite of scenarios on the same job pays for it once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from chaos.analysis.checkpoints import golden_summary
from chaos.history import read_history
from chaos.plan import SHIPPED_WORKLOADS
from chaos.scenario import Checks, CommandWorkload, Expect, NodeRestart, Scenario

# Arguments of the shipped workload that change how and when it saves or breaks, never what a fault-free run
# computes (the planted bugs only act on resume), so they stay out of the key.
NUMERICALLY_NEUTRAL_ARGS = {"checkpoint_dir", "checkpoint_every", "keep", "bug", "pg_timeout_s", "step_time_ms"}


def wants_golden(scenario: Scenario) -> bool:
    if not scenario.checks.golden:
        return False
    w = scenario.workload
    return not isinstance(w, CommandWorkload) or "loss" in re.compile(w.progress_regex).groupindex


def golden_key(scenario: Scenario) -> str:
    import torch

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
                "threads": c.threads_per_proc, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def golden_scenario(scenario: Scenario) -> Scenario:
    return scenario.model_copy(deep=True, update={
        "name": f"{scenario.name}-golden", "faults": [], "expect": Expect(), "checks": Checks(golden=False),
        # Local processes: the reference numbers do not depend on where nodes run (a container runs the same torch
        # build), and a fault-free run needs no network of its own.
        "cluster": scenario.cluster.model_copy(update={"node_restart": NodeRestart(policy="never"),
                                                       "runtime": "local"}),
    })


def ensure_golden(scenario: Scenario, out_dir: Path) -> dict[str, Any]:
    """The golden summary for this scenario's workload, running the golden run first if it is not cached."""
    from chaos.engine import Engine

    key = golden_key(scenario)
    home = out_dir / "golden" / key
    summary_path = home / "golden.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        summary["cached"] = True
        return summary
    home.mkdir(parents=True, exist_ok=True)
    engine = Engine(golden_scenario(scenario), out_dir=home)
    engine.run()
    summary = golden_summary(read_history(engine.run_dir / "events.jsonl"))
    summary.update(key=key, run_dir=str(engine.run_dir), cached=False)
    if summary["completed"]:  # a failed golden run is reported, not cached
        tmp = home / ".golden.json.tmp"
        tmp.write_text(json.dumps(summary))
        os.replace(tmp, summary_path)
    return summary
