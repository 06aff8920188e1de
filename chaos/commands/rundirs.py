"""A run directory as ``report``, ``project`` and ``compare`` read it: recognised, analysed, projected to scale."""

from __future__ import annotations

import argparse
from pathlib import Path

from chaos.analysis.projection import Projection, project_run
from chaos.analysis.run import RunAnalysis, analyze_run
from chaos.commands import error
from chaos.loading import ScenarioInvalid
from chaos.paths import shown

# What a run directory keeps of its run: a report written over one of them would destroy what it reports on.
RUN_RECORDS = frozenset({"events.jsonl", "scenario.yaml", "plan.yaml", "golden.json", "control.json", "result.json"})


def is_run_record(output: Path, run_dir: Path) -> bool:
    """Whether ``output`` is one of the records of the run in ``run_dir`` (RUN_RECORDS)."""
    try:
        return output.name in RUN_RECORDS and output.resolve().parent == run_dir.resolve()
    except (OSError, RuntimeError):  # a loop of links: the write itself will say what is wrong
        return False


def is_run_dir(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run; if not, said on stderr."""
    if (run_dir / "events.jsonl").exists() and (run_dir / "scenario.yaml").exists():
        return True
    error(f"{run_dir}: not a run directory (it needs events.jsonl and "
          "scenario.yaml)")
    return False


def projected(args: argparse.Namespace, analysis: RunAnalysis, nodes: int,
              scaling: tuple[RunAnalysis, ...] = ()) -> Projection:
    """The projection of an analysed run for ``chaos project`` / ``chaos report --project-nodes``; ``scaling``: the
    other runs ``chaos project`` was given, at other node counts."""
    return project_run(analysis, nodes, mtbf_node=args.mtbf_node, preset=args.preset, job_days=args.job_days,
                       checkpoint_cost=args.checkpoint_cost, recovery=args.recovery,
                       checkpoint_interval=args.checkpoint_interval, trials=args.trials, seed=args.seed,
                       step=args.step_s, incidents=args.incidents, incidents_nodes=args.incidents_nodes,
                       scaling=scaling, gpus_per_node=args.gpus_per_node, price_per_gpu_hour=args.price_per_gpu_hour)


def analysed(run_dir: Path) -> RunAnalysis | None:
    """The run's analysis, or None after saying why it could not be made (a damaged history gets a message, never
    a traceback); a damaged scenario.yaml is raised for its file:line errors (exit 2)."""
    try:
        return analyze_run(run_dir)
    except ScenarioInvalid:
        raise
    except Exception as exc:
        error(f"{shown(run_dir)}: cannot analyse this run directory ({type(exc).__name__}: {exc}); torch-chaos "
              "reads its events.jsonl, scenario.yaml and golden.json")
        return None
