"""``chaos validate FILE...``: check scenario files and report every error (exit 2 if any)."""

from __future__ import annotations

import argparse

from chaos.commands import out, scenario_errors, styled
from chaos.commands.admitted import load
from chaos.loading import ScenarioInvalid
from chaos.run_result import EXIT_PASS, EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """Admit each file as ``run`` would (schema, plan, program, machine unless ``--no-machine``); every error of
    every file is said, exit 2 if any."""
    bad = 0
    for name in args.files:
        try:
            scenario = load(name, args.runtime, machine=args.machine)
        except ScenarioInvalid as exc:
            bad += 1
            scenario_errors(exc)
            continue
        out.print(styled("green", "ok", f"{name}: {scenario.name} ({len(scenario.faults)} fault(s))"),
                  highlight=False)
    return EXIT_USAGE if bad else EXIT_PASS
