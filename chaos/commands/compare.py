"""``chaos compare``: scenarios (or run directories) side by side; ``--sweep``: one interconnect sweep."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from chaos.commands import err, error, out
from chaos.commands.admitted import load
from chaos.commands.rundirs import analysed
from chaos.compare import same_runs, write_comparison
from chaos.engine import Engine
from chaos.run_result import EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from chaos.sweep import baseline_scenario, fit_steps, measure_point, parse_sweep, swept_scenario, write_sweep


def main(args: argparse.Namespace) -> int:
    """Run the scenarios (or take ``--from-runs`` directories), analyse each, write the comparison; every file is
    validated before anything runs."""
    if args.sweep:
        return _compare_sweep(args)
    if args.from_runs:
        run_dirs = [Path(p) for p in args.items]
        missing = [str(p) for p in run_dirs if not (p / "events.jsonl").exists()]
        if missing:
            error(f"not run directories: {', '.join(missing)}")
            return EXIT_USAGE
        clash = same_runs(run_dirs)
        if clash:
            error(clash)
            return EXIT_USAGE
    else:
        scenarios = [load(p, args.runtime) for p in args.items]  # every file validated before anything runs
        run_dirs = []
        for scenario in scenarios:
            err.print(f"running {scenario.name} ...", highlight=False)
            engine = Engine(scenario, out_dir=args.out)
            result = engine.run()
            err.print(f"  {scenario.name}: {result['verdict']} ({result['why']})", highlight=False)
            run_dirs.append(engine.run_dir)
    analyses = []
    for run_dir in run_dirs:
        analysis = analysed(run_dir)
        if analysis is None:
            return EXIT_FAIL
        analyses.append(analysis)
    try:
        paths = write_comparison(analyses, Path(args.output))
    except OSError as exc:  # every run was analysed above: this is the output's fault
        where = f" ({exc.filename})" if exc.filename else ""
        error(f"cannot write the comparison into {args.output}: {exc.strerror or exc}{where}; -o/--output names a "
              "directory to write it in")
        return EXIT_USAGE
    except Exception as exc:  # a run's figures a report cannot draw (a damaged history): a message, never a traceback
        error(f"cannot render the comparison or a run's report ({type(exc).__name__}: {exc}); the runs' "
              "events.jsonl, scenario.yaml, plan.yaml and golden.json are what it is made from")
        return EXIT_FAIL
    out.print(paths["md"].read_text(), highlight=False, markup=False)
    out.print(f"written: {paths['html']}, {paths['md']}, {paths['json']}", highlight=False)
    return EXIT_PASS


def _compare_sweep(args: argparse.Namespace) -> int:
    """``compare --sweep KIND=V1,V2,...``: the one-node scenario once without faults, each multi-node one per value
    with every node's link impaired (chaos.sweep)."""


    try:
        kind, values = parse_sweep(args.sweep)
    except ValueError as exc:
        error(str(exc))
        return EXIT_USAGE
    if args.from_runs:
        error("--sweep runs its scenarios; it does not take --from-runs")
        return EXIT_USAGE
    scenarios = [load(p, args.runtime) for p in args.items]
    rounds = [s.name for s in scenarios if s.cluster.mode == "federated"]
    if rounds:
        error(f"--sweep draws steps per second against link quality; {', '.join(rounds)} count federated rounds, not "
              "steps: compare them without --sweep (they get a page of their own, with rounds instead of steps)")
        return EXIT_USAGE
    single = [s for s in scenarios if s.cluster.nodes == 1]
    multi = [s for s in scenarios if s.cluster.nodes > 1]
    if len(single) != 1 or not multi:
        error("--sweep needs exactly one one-node scenario (the baseline) and at least one "
              "multi-node scenario")
        return EXIT_USAGE

    def run(scenario: Any) -> Any:
        err.print(f"running {scenario.name} ...", highlight=False)
        engine = Engine(scenario, out_dir=args.out)
        result = engine.run()
        err.print(f"  {scenario.name}: {result['verdict']} ({result['why']})", highlight=False)
        return measure_point(engine.run_dir)

    baseline = run(baseline_scenario(single[0]))
    swept: dict[str, list[tuple[str, Any, str]]] = {}
    for scenario in multi:
        previous: tuple[str, Any] | None = None
        for value in values:  # best link first: each point's steps are fitted from the one before (fit_steps)
            steps, note = fit_steps(scenario, kind, previous, value)
            if note:
                err.print(f"  {note}", highlight=False)
            column = run(swept_scenario(scenario, kind, value, steps))
            label = column.label.replace(f"-{kind}-{value}", "", 1)  # the curve is the scenario's, not one run's
            swept.setdefault(label, []).append((value, column, note))
            previous = (value, column)
    paths = write_sweep(kind, baseline, swept, Path(args.output))
    out.print(paths["md"].read_text(), highlight=False, markup=False)
    out.print(f"written: {paths['md']}, {paths['svg']}, {paths['json']}", highlight=False)
    return EXIT_PASS
