"""``chaos run SCENARIO``: run a scenario and measure recovery (``--dry-run``: the resolved plan only)."""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import yaml
from rich.live import Live

from chaos.commands import EXIT_INTERRUPTED, err, error, out, process_is_ours
from chaos.commands.admitted import load
from chaos.console import live_view, summary
from chaos.engine import Engine, RunInterrupted, new_run_id
from chaos.plan import PlanError, build_plan
from chaos.run_result import EXIT_PASS, EXIT_USAGE, exit_code_for
from chaos.runtimes import create_runtime


def exit_for(result: dict[str, Any]) -> int:
    """The exit code of a run's result: 130 when it was interrupted, else its verdict's."""
    if result["end_reason"] == "interrupted":
        return EXIT_INTERRUPTED
    return exit_code_for(result["verdict"])


def main(args: argparse.Namespace) -> int:
    """Run the scenario (live view on a terminal, plain lines otherwise, result.json with ``--json``);
    ``--dry-run``: the resolved plan, and a scheduler's commands, without running anything."""
    # A dry run executes nothing, so it needs nothing of the machine: a plan for a Slurm cluster can be reviewed
    # off the cluster (the machine checks still stop a real run).
    scenario = load(args.scenario, args.runtime, machine=not args.dry_run)
    if args.dry_run:
        run_id = new_run_id(scenario)
        try:
            run_dir = Path(args.out).resolve() / run_id
            runtime = create_runtime(scenario, run_id, str(run_dir))
            plan = build_plan(scenario, run_id, run_dir, runtime.addressing(scenario))
        except PlanError as exc:
            error(f"{args.scenario}: {exc}")
            return EXIT_USAGE
        shown = plan.to_dict()
        commands = runtime.dry_run_commands(plan)
        if commands:  # a scheduler's lines (salloc/srun): exactly what the run would execute
            shown["commands"] = commands
        if args.json:
            print(json.dumps(shown, indent=2))
        else:
            print(yaml.safe_dump(shown, sort_keys=False, width=200))
        return EXIT_PASS

    if process_is_ours():
        # Everything imported and built so far (pydantic's schemas, rich, the scenario) lives until the exit: out of
        # the cyclic collector's reach, its collections walk only what the run makes. Measured (issue 36): the
        # analysis at the end 0.06-0.12 s instead of 0.11-0.46 s, and fewer long collections in the engine's ticks.
        gc.freeze()
    try:
        engine = Engine(scenario, out_dir=args.out)
        if args.json or not out.is_terminal:
            result = engine_run_plain(engine, quiet=args.json)
        else:
            with Live(console=out, refresh_per_second=4, transient=True) as live:
                last = [0.0]

                def update(snap: Any) -> None:
                    # the engine ticks every 20 ms; redraw at most 4 times a second
                    now = time.monotonic()
                    if now - last[0] >= 0.25 or snap.phase == "finished":
                        last[0] = now
                        live.update(live_view(snap))

                engine.on_update = update
                result = engine.run()
    except PlanError as exc:
        error(f"{args.scenario}: {exc}")
        return EXIT_USAGE
    except RunInterrupted as exc:
        result = exc.result  # torn down and written: show what was measured, then exit 130
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        summary(result, out)
        out.print(f"run directory: {engine.run_dir}", highlight=False)
    return exit_for(result)


def engine_run_plain(engine: Any, quiet: bool) -> dict[str, Any]:
    """Without a terminal (CI logs, --json): print each engine note once, as a plain line, to stderr."""
    printed = [0]

    def update(snap: Any) -> None:
        new = engine.log[printed[0]:] if len(engine.log) > printed[0] else []
        for line in new:
            err.print(line, highlight=False)
        printed[0] = len(engine.log)

    engine.on_update = None if quiet else update  # quiet: no snapshot is built at every tick
    return engine.run()
