"""``chaos explore SCENARIO``: search for a failing fault plan and shrink it to a minimal reproducer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.text import Text

from chaos.commands import err, error, out, styled
from chaos.commands.admitted import load
from chaos.engine import run
from chaos.explore import explore
from chaos.run_result import EXIT_FAIL, EXIT_PASS, EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """Draw fault plans within the scenario's ``explore`` bounds; a failing one is shrunk, written as a reproducer
    and replayed (unless ``--no-confirm``): exit 1; none found: exit 0."""
    scenario = load(args.scenario, args.runtime)
    if scenario.explore is None:
        error(f"{args.scenario}: explore: the scenario has no 'explore' section with the "
              "bounds to draw fault plans from (kinds, targets, max_faults, step_window, events ...)")
        return EXIT_USAGE

    def progress(exploration: Any, line: str) -> None:
        err.print(f"[{exploration.phase}] {line}  (failures so far: {exploration.failures})", highlight=False)

    summary = explore(scenario, out_dir=args.out, budget=args.budget, seed=args.seed,
                      shrink_budget=args.shrink_budget, on_progress=progress)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    if not summary["found"]:
        out.print(styled("green", "no failing plan", f"in {summary['plans_tried']} plan(s) (seed {args.seed})"))
        return EXIT_PASS
    out.print(Text.assemble(("failing plan found", "red"), f" after {summary['plans_tried']} run(s); minimal plan: ",
                            (str(summary["minimal_plan"]), "bold"), f"\nreproducer: {summary['reproducer']}"),
              highlight=False)
    if not args.no_confirm:
        replay = run(summary["reproducer"], out_dir=Path(summary["reproducer"]).parent / "replay")
        out.print(f"replayed the reproducer: verdict {replay['verdict']} ({replay['why']})", highlight=False)
    return EXIT_FAIL
