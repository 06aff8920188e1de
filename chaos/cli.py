"""The ``torch-chaos`` / ``chaos`` command: a thin face over the library (run, validate, report …).

Exit codes: 0 pass, 1 fail (a failed expectation, hung, restart loop: the job broke), 2 invalid input or usage,
3 error (the test did not happen: a planned fault never fired, the engine failed, the job never started or
recorded no step), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chaos import scenario as scenario_model
from chaos.cluster.spec import REPO_ROOT_DEFAULT, check_name, check_nodes, engine_run_argv
from chaos.image import ImageBuildError, build_image, image_tag
from chaos.loading import ScenarioInvalid, load_scenario, resolve_scenario_path, shipped_scenarios_dir
from chaos.paths import shown
from chaos.plan import PlanError, build_plan
from chaos.registry import fault_plugins, launcher_plugins, load_errors, rendezvous_plugins, runtime_plugins
from chaos.run_result import EXIT_FAIL, EXIT_PASS, EXIT_USAGE, exit_code_for
from chaos.runtimes import create_runtime
from chaos.scenario import parse_duration
from chaos.terminal import SafeConsole
from chaos.version import __version__

EXIT_INTERRUPTED = 130

# No markup and no emoji codes: what the consoles print is mostly what users and their jobs wrote (scenario names,
# paths, a worker's last lines such as "[rank0]: ..."), which rich would otherwise read as styles (dropping the text,
# or failing on a stray "[/...]") and ":name:" as emoji. Styled words are Text spans (_error, _styled).
out = SafeConsole(width=None if sys.stdout.isatty() else 120, markup=False, emoji=False)
err = SafeConsole(stderr=True, soft_wrap=True, markup=False, emoji=False)  # one error per line: file:line: field: why


def _styled(style: str, word: str, rest: str = "") -> Text:
    """``word`` in ``style``, then ``rest`` as it is."""
    return Text.assemble((word, style), " " if rest else "", rest)


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (each is a real run: a budget of a million is a mistake)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low} to {high}, got {value}")
        return value

    return parse


def _error(message: str) -> None:
    """``error <message>`` on stderr, the message exactly as given."""
    err.print(_styled("red", "error", message), highlight=False)


def _scenario_errors(exc: ScenarioInvalid) -> None:
    """Each error of a scenario, then what could not be checked before they are fixed (a note, not an error)."""
    for e in exc.errors:
        _error(str(e))
    if exc.later:
        err.print(f"note: {exc.later}", style="dim", highlight=False)


def _load(path: str, runtime: str | None = None, machine: bool = True) -> Any:
    """The one judgement validate and run share (chaos.admission): schema, plan, program, machine."""
    from chaos.admission import admit  # lazy: the machine checks, only when a run is validated against this machine

    return admit(resolve_scenario_path(path), runtime=runtime, machine=machine)


def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for name in args.files:
        try:
            scenario = _load(name, args.runtime, machine=args.machine)
        except ScenarioInvalid as exc:
            bad += 1
            _scenario_errors(exc)
            continue
        out.print(_styled("green", "ok", f"{name}: {scenario.name} ({len(scenario.faults)} fault(s))"),
                  highlight=False)
    return EXIT_USAGE if bad else EXIT_PASS


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_model.model().model_json_schema(), indent=2))
    return EXIT_PASS


_EXPECTED_VERDICT = re.compile(r"Expected\s+verdict:\s*`?([A-Za-z_]+)")


def cmd_list(args: argparse.Namespace) -> int:
    """One line per shipped scenario, grouped by folder, with its runtime and documented verdict (the words
    "Expected verdict: X" of its description); ``--long``: the whole descriptions."""
    if args.long:
        return _list_long()
    root = shipped_scenarios_dir()
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root).with_suffix("").as_posix()
        try:
            scenario = load_scenario(path)
            found = _EXPECTED_VERDICT.search(scenario.description)
            runtime, verdict = str(scenario.cluster.runtime), found.group(1).lower() if found else "-"
        except ScenarioInvalid as exc:
            runtime, verdict = "?", f"invalid: {exc.errors[0]}"
        groups.setdefault(rel.rpartition("/")[0] or ".", []).append((rel, runtime, verdict))
    width = max(len(rel) for rows in groups.values() for rel, _, _ in rows)
    for folder, rows in groups.items():
        out.print(Text("shipped" if folder == "." else f"{folder}/", style="bold"))
        for rel, runtime, verdict in rows:
            out.print(f"  {rel:<{width}}  {runtime:<7} {verdict}")
    out.print(f"{sum(len(r) for r in groups.values())} scenarios (name, runtime, expected verdict); `chaos list "
              "--long` describes each; `chaos run NAME --runtime docker` runs one on another runtime")
    return EXIT_PASS


def _list_long() -> int:
    # One file per scenario, not per runtime: the runtime column is the file's default; `--runtime` runs it on
    # another (a fault the runtime cannot inject is refused then, file:line named, as if the file said so).
    t = Table(title="shipped scenarios",
              caption="run one on another runtime: chaos run NAME --runtime netns (or docker); "
                      "network faults need netns or docker")
    t.add_column("name")
    t.add_column("runtime")
    t.add_column("description", overflow="fold")
    root = shipped_scenarios_dir()
    for path in sorted(root.rglob("*.yaml")):
        try:
            scenario = load_scenario(path)
            desc, runtime = Text(" ".join(scenario.description.split())), str(scenario.cluster.runtime)
        except ScenarioInvalid as exc:
            desc, runtime = Text(f"invalid: {exc.errors[0]}", style="red"), "?"
        t.add_row(str(path.relative_to(root).with_suffix("")), runtime, desc)
    out.print(t)
    return EXIT_PASS


def cmd_plugins(args: argparse.Namespace) -> int:
    """Every installed plug-in, where it comes from and what it needs: what a scenario may name."""

    rows: list[dict[str, Any]] = []
    for name, f in fault_plugins().items():
        rows.append({"group": "fault", "name": name, "summary": f.summary, "module": f.__module__,
                     "needs": sorted(f.needs), "disruptive": f.disruptive, "explore": f.can_generate()})
    for name, r in runtime_plugins().items():
        rows.append({"group": "runtime", "name": name, "summary": r.summary, "module": r.__module__,
                     "capabilities": sorted(r.capabilities) + [f"{c} (where the machine gives it)" for c in
                                                               sorted(getattr(r, "conditional_capabilities", ()))]})
    for name, b in rendezvous_plugins().items():
        rows.append({"group": "rendezvous", "name": name, "summary": b.summary, "module": b.__module__})
    for name, launcher in launcher_plugins().items():
        rows.append({"group": "launcher", "name": name, "summary": launcher.summary, "module": launcher.__module__,
                     "needs": [f"mode {launcher.mode}"] + ([f"runtimes: {', '.join(sorted(launcher.runtimes))}"]
                                                          if launcher.runtimes is not None else [])})
    broken = [str(e) for e in load_errors()]
    if args.json:
        print(json.dumps({"plugins": rows, "failed_to_load": broken}, indent=2))
        return EXIT_PASS if not broken else EXIT_FAIL
    t = Table(title="installed plug-ins (entry points torch_chaos.faults / .runtimes / .rendezvous / .launchers)")
    for col in ("group", "name", "what it does", "needs / gives", "module"):
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(row["group"], row["name"], row["summary"],
                  ", ".join(row.get("needs", row.get("capabilities", []))), row["module"])
    out.print(t)
    for line in broken:
        err.print(_styled("red", "failed to load", line), highlight=False)
    return EXIT_PASS if not broken else EXIT_FAIL


def _exit_for(result: dict[str, Any]) -> int:
    if result["end_reason"] == "interrupted":
        return EXIT_INTERRUPTED
    return exit_code_for(result["verdict"])


def cmd_run(args: argparse.Namespace) -> int:
    # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
    from chaos.engine import Engine, new_run_id

    # A dry run executes nothing, so it needs nothing of the machine: a plan for a Slurm cluster can be reviewed
    # off the cluster (the machine checks still stop a real run).
    scenario = _load(args.scenario, args.runtime, machine=not args.dry_run)
    if args.dry_run:
        run_id = new_run_id(scenario)
        try:
            run_dir = Path(args.out).resolve() / run_id
            runtime = create_runtime(scenario, run_id, str(run_dir))
            plan = build_plan(scenario, run_id, run_dir, runtime.addressing(scenario))
        except PlanError as exc:
            _error(f"{args.scenario}: {exc}")
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
    # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
    from chaos.engine import RunInterrupted

    try:
        engine = Engine(scenario, out_dir=args.out)
        if args.json or not out.is_terminal:
            result = engine_run_plain(engine, quiet=args.json)
        else:
            # lazy: the analysis behind the summary, only for the commands that print one
            from chaos.console import live_view

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
        _error(f"{args.scenario}: {exc}")
        return EXIT_USAGE
    except RunInterrupted as exc:
        result = exc.result  # torn down and written: show what was measured, then exit 130
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        from chaos.console import summary  # lazy: the analysis behind the summary, only for the commands that print one

        summary(result, out)
        out.print(f"run directory: {engine.run_dir}", highlight=False)
    return _exit_for(result)


def engine_run_plain(engine: Any, quiet: bool) -> dict[str, Any]:
    """Without a terminal (CI logs, --json): print each engine note once, as a plain line, to stderr."""
    printed = [0]

    def update(snap: Any) -> None:
        if quiet:
            return
        new = engine.log[printed[0]:] if len(engine.log) > printed[0] else []
        for line in new:
            err.print(line, highlight=False)
        printed[0] = len(engine.log)

    engine.on_update = update
    return engine.run()


def cmd_report(args: argparse.Namespace) -> int:
    from chaos.analysis.projection import ProjectionError  # lazy: numpy, only for the commands that project

    # lazy: the whole analysis, only for the commands that analyse a run
    from chaos.analysis.run import analyze_run, write_result
    from chaos.console import summary  # lazy: the analysis behind the summary, only for the commands that print one

    run_dir = Path(args.run_dir)
    if not _is_run_dir(run_dir):
        return EXIT_USAGE
    try:
        mtbf = parse_duration(args.mtbf) if args.mtbf is not None else None
        if mtbf is not None and not (isinstance(mtbf, float) and math.isfinite(mtbf) and mtbf > 0):
            raise ValueError(f"expected a positive duration such as 6h, got {args.mtbf!r}")
    except ValueError as exc:
        _error(f"--mtbf: {exc}")
        return EXIT_USAGE
    if args.project_nodes is None and (args.mtbf_node or args.preset or args.incidents):
        _error("--mtbf-node / --preset / --incidents: a projection needs --project-nodes N")
        return EXIT_USAGE
    if args.output and _is_run_record(Path(args.output), run_dir):
        _error(f"-o {args.output}: that is the run's own {Path(args.output).name}, which the report is computed "
               "from; name another file")
        return EXIT_USAGE
    try:
        analysis = analyze_run(run_dir)  # once: result.json and the report present the same analysis
        try:
            projection = _projection(args, analysis, args.project_nodes) if args.project_nodes is not None else None
        except ProjectionError as exc:
            _error(str(exc).replace("--nodes:", "--project-nodes:", 1))  # `chaos report`'s name for `project`'s option
            return EXIT_USAGE
        try:
            result = write_result(analysis)
        except OSError as exc:  # a read-only copy of a run is still worth a report
            result = analysis.result
            err.print(f"note: {run_dir / 'result.json'} not rewritten ({exc.strerror or exc}); the report below "
                      "is computed from the history all the same", highlight=False)
        if args.format == "text":
            summary(result, out)
            if mtbf is not None:  # the interval advice the other formats carry, for the MTBF asked about
                from chaos.reports.model import build_report  # lazy: numpy, only for reports
                from chaos.reports.text import advice_lines  # lazy: numpy, only for reports

                for line in advice_lines(build_report(analysis, mtbf_s=mtbf)):
                    out.print(line, highlight=False)
            if projection is not None:
                from chaos.reports.projection import render_text  # lazy: numpy, only for the commands that project

                out.print(render_text(projection), highlight=False, markup=False)
        else:
            from chaos.reports import write_report  # lazy: matplotlib, only for reports

            try:
                path = write_report(analysis, args.format, args.output, mtbf_s=mtbf, projection=projection)
            except OSError as exc:
                where = args.output or f"the {args.format} report in {run_dir}"
                _error(f"cannot write {where}: {exc.strerror or exc}; -o/--output names another file")
                return EXIT_USAGE
            out.print(f"{args.format} report: {shown(path)}", highlight=False)
    except ScenarioInvalid:
        raise  # scenario.yaml itself is damaged: file:line errors, exit 2
    except Exception as exc:  # a damaged history must give a message, never a traceback
        _error(f"{shown(run_dir)}: cannot analyse this run directory "
               f"({type(exc).__name__}: {exc}); `chaos report` reads events.jsonl, scenario.yaml "
               "and golden.json")
        return EXIT_FAIL
    return exit_code_for(result["verdict"])


# What a run directory keeps of its run: a report written over one of them would destroy what it reports on.
RUN_RECORDS = frozenset({"events.jsonl", "scenario.yaml", "plan.yaml", "golden.json", "control.json", "result.json"})


def _is_run_record(output: Path, run_dir: Path) -> bool:
    try:
        return output.name in RUN_RECORDS and output.resolve().parent == run_dir.resolve()
    except (OSError, RuntimeError):  # a loop of links: the write itself will say what is wrong
        return False


def _is_run_dir(run_dir: Path) -> bool:
    if (run_dir / "events.jsonl").exists() and (run_dir / "scenario.yaml").exists():
        return True
    _error(f"{run_dir}: not a run directory (it needs events.jsonl and "
           "scenario.yaml)")
    return False


def _format_name(aliases: dict[str, str]) -> Callable[[str], str]:
    """``--format`` as argparse's ``type``: one spelling of Markdown per command was a usage error waiting to happen
    (``report`` said ``md``, ``project`` said ``markdown``), so each accepts the other's."""
    return lambda value: aliases.get(value, value)


def _projection(args: argparse.Namespace, analysis: Any, nodes: int, scaling: tuple[Any, ...] = ()) -> Any:
    """The projection of an analysed run for ``chaos project`` / ``chaos report --project-nodes``; ``scaling``: the
    other runs ``chaos project`` was given, at other node counts."""
    from chaos.analysis.projection import project_run  # lazy: numpy, only for the commands that project

    return project_run(analysis, nodes, mtbf_node=args.mtbf_node, preset=args.preset, job_days=args.job_days,
                       checkpoint_cost=args.checkpoint_cost, recovery=args.recovery,
                       checkpoint_interval=args.checkpoint_interval, trials=args.trials, seed=args.seed,
                       step=args.step_s, incidents=args.incidents, incidents_nodes=args.incidents_nodes,
                       scaling=scaling, gpus_per_node=args.gpus_per_node, price_per_gpu_hour=args.price_per_gpu_hour)


def _analysed(run_dir: Path) -> Any:
    """The run's analysis, or None after saying why it could not be made (a damaged history gets a message, never
    a traceback); a damaged scenario.yaml is raised for its file:line errors (exit 2)."""
    from chaos.analysis.run import analyze_run  # lazy: the whole analysis, only for the commands that analyse a run

    try:
        return analyze_run(run_dir)
    except ScenarioInvalid:
        raise
    except Exception as exc:
        _error(f"{shown(run_dir)}: cannot analyse this run directory ({type(exc).__name__}: {exc}); torch-chaos "
               "reads its events.jsonl, scenario.yaml and golden.json")
        return None


def cmd_project(args: argparse.Namespace) -> int:
    """Project a run's measured recovery and checkpoint cost to N nodes under a failure model."""
    from chaos.analysis.projection import ProjectionError  # lazy: numpy, only for the commands that project

    run_dirs = [Path(d) for d in args.run_dir]
    if not all(_is_run_dir(d) for d in run_dirs):
        return EXIT_USAGE
    analyses = [_analysed(d) for d in run_dirs]
    if any(a is None for a in analyses):
        return EXIT_FAIL
    try:
        projection = _projection(args, analyses[0], args.nodes, tuple(analyses))
    except ProjectionError as exc:
        _error(str(exc))
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(projection.to_dict(), indent=2, default=str))
    elif args.format == "markdown":
        from chaos.reports.projection import render_markdown  # lazy: numpy, only for the commands that project

        print(render_markdown(projection, level=1, full=args.all_intervals))
    else:
        from chaos.reports.projection import render_text  # lazy: numpy, only for the commands that project

        print(render_text(projection, full=args.all_intervals), end="")
    return EXIT_PASS


def cmd_explore(args: argparse.Namespace) -> int:
    from chaos.explore import explore  # lazy: hypothesis, only for explore

    scenario = _load(args.scenario, args.runtime)
    if scenario.explore is None:
        _error(f"{args.scenario}: explore: the scenario has no 'explore' section with the "
               "bounds to draw fault plans from (kinds, targets, max_faults, step_window, events ...)")
        return EXIT_USAGE

    def progress(exploration: Any, line: str) -> None:
        err.print(f"[{exploration.phase}] {line}  (failures so far: {exploration.failures})", highlight=False)

    summary = explore(scenario, out_dir=args.out, budget=args.budget, seed=args.seed,
                      shrink_budget=args.shrink_budget, on_progress=progress)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    if not summary["found"]:
        out.print(_styled("green", "no failing plan", f"in {summary['plans_tried']} plan(s) (seed {args.seed})"))
        return EXIT_PASS
    out.print(Text.assemble(("failing plan found", "red"), f" after {summary['plans_tried']} run(s); minimal plan: ",
                            (str(summary["minimal_plan"]), "bold"), f"\nreproducer: {summary['reproducer']}"),
              highlight=False)
    if not args.no_confirm:
        # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
        from chaos.engine import run

        replay = run(summary["reproducer"], out_dir=Path(summary["reproducer"]).parent / "replay")
        out.print(f"replayed the reproducer: verdict {replay['verdict']} ({replay['why']})", highlight=False)
    return EXIT_FAIL


def cmd_compare(args: argparse.Namespace) -> int:
    from chaos.compare import same_runs, write_comparison  # lazy: matplotlib, only for compare

    if args.sweep:
        return _compare_sweep(args)
    if args.from_runs:
        run_dirs = [Path(p) for p in args.items]
        missing = [str(p) for p in run_dirs if not (p / "events.jsonl").exists()]
        if missing:
            _error(f"not run directories: {', '.join(missing)}")
            return EXIT_USAGE
        clash = same_runs(run_dirs)
        if clash:
            _error(clash)
            return EXIT_USAGE
    else:
        # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
        from chaos.engine import Engine

        scenarios = [_load(p, args.runtime) for p in args.items]  # every file validated before anything runs
        run_dirs = []
        for scenario in scenarios:
            err.print(f"running {scenario.name} ...", highlight=False)
            engine = Engine(scenario, out_dir=args.out)
            result = engine.run()
            err.print(f"  {scenario.name}: {result['verdict']} ({result['why']})", highlight=False)
            run_dirs.append(engine.run_dir)
    analyses = []
    for run_dir in run_dirs:
        analysis = _analysed(run_dir)
        if analysis is None:
            return EXIT_FAIL
        analyses.append(analysis)
    try:
        paths = write_comparison(analyses, Path(args.output))
    except OSError as exc:  # every run was analysed above: this is the output's fault
        where = f" ({exc.filename})" if exc.filename else ""
        _error(f"cannot write the comparison into {args.output}: {exc.strerror or exc}{where}; -o/--output names a "
               "directory to write it in")
        return EXIT_USAGE
    except Exception as exc:  # a run's figures a report cannot draw (a damaged history): a message, never a traceback
        _error(f"cannot render the comparison or a run's report ({type(exc).__name__}: {exc}); the runs' "
               "events.jsonl, scenario.yaml, plan.yaml and golden.json are what it is made from")
        return EXIT_FAIL
    out.print(paths["md"].read_text(), highlight=False, markup=False)
    out.print(f"written: {paths['html']}, {paths['md']}, {paths['json']}", highlight=False)
    return EXIT_PASS


def _compare_sweep(args: argparse.Namespace) -> int:
    """``compare --sweep KIND=V1,V2,...``: the one-node scenario once without faults, each multi-node one per value
    with every node's link impaired (chaos.sweep)."""
    # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
    from chaos.engine import Engine

    # lazy: matplotlib, only for compare --sweep
    from chaos.sweep import baseline_scenario, fit_steps, measure_point, parse_sweep, swept_scenario, write_sweep

    try:
        kind, values = parse_sweep(args.sweep)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_USAGE
    if args.from_runs:
        _error("--sweep runs its scenarios; it does not take --from-runs")
        return EXIT_USAGE
    scenarios = [_load(p, args.runtime) for p in args.items]
    single = [s for s in scenarios if s.cluster.nodes == 1]
    multi = [s for s in scenarios if s.cluster.nodes > 1]
    if len(single) != 1 or not multi:
        _error("--sweep needs exactly one one-node scenario (the baseline) and at least one "
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


def cmd_cleanup(args: argparse.Namespace) -> int:
    from chaos.cleanup import cleanup  # lazy: the engine, only for cleanup

    # lazy: the engine, analysis and reports (matplotlib): not for validate, schema, list, --help
    from chaos.engine.core import RUN_ID

    if args.run_id is not None and not RUN_ID.fullmatch(args.run_id):
        _error(f"--run-id {args.run_id!r}: not a run id (a run directory's name, such as "
               "20261201-113130-quickstart-f534b9); without --run-id, cleanup removes what dead engines left")
        return EXIT_USAGE
    removed = cleanup(args.run_id, only_orphans=not args.all and args.run_id is None)
    for line in removed:
        out.print(f"removed {line}", highlight=False)
    out.print(f"removed {len(removed)} leftover torch-chaos object(s)", highlight=False)
    return EXIT_PASS


def cmd_doctor(args: argparse.Namespace) -> int:
    from chaos.doctor import machine_checks  # lazy: the engine's checks, only for doctor

    checks = machine_checks()
    t = Table(title="what this machine supports")
    for col in ("check", "ok", "detail", "fix"):
        t.add_column(col, overflow="fold")
    for c in checks:
        mark = Text("yes", style="green") if c.ok else Text("no", style="red" if c.required else "yellow")
        t.add_row(c.name, mark, c.detail, "" if c.ok else c.fix)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        out.print(t)
        out.print(f"plug-ins loaded: {len(fault_plugins())} fault kinds, {len(runtime_plugins())} runtimes, "
                  f"{len(rendezvous_plugins())} rendezvous backends; `chaos plugins` lists each, where it comes "
                  "from and what it needs", highlight=False)
    return EXIT_PASS if all(c.ok or not c.required for c in checks) else EXIT_FAIL


def cmd_image(args: argparse.Namespace) -> int:
    if args.action == "tag":
        print(image_tag())
        return EXIT_PASS
    try:
        result = build_image(method=args.method, force=args.force, log=lambda line: out.print(line, highlight=False))
    except ImageBuildError as exc:
        _error(str(exc))
        return EXIT_FAIL
    size = f", {result.size_bytes / 1e9:.2f} GB" if result.size_bytes else ""
    out.print(f"image {result.tag} ({result.method}, {result.seconds:.1f}s{size})", highlight=False)
    return EXIT_PASS


def cmd_cluster(args: argparse.Namespace) -> int:
    """``chaos cluster up|down|status|build [slurm]``: a Slurm cluster in containers (chaos/cluster/slurm.py)."""
    from chaos.cluster import slurm  # lazy: the cluster builder, only for chaos cluster

    def usage(message: str) -> int:
        _error(message)
        return EXIT_USAGE

    name = args.name or args.kind
    problems = [p for p in (check_name(name), check_nodes(args.nodes) if args.nodes is not None else None) if p]
    if args.action != "up":
        given = [flag for flag, value in (("--nodes", args.nodes), ("--timeout", args.timeout),
                                          ("--no-repo", args.no_repo or None)) if value is not None]
        given += ["--dry-run"] if args.dry_run else []
        if given:
            problems.append(f"{', '.join(given)}: only `chaos cluster up` takes {'it' if len(given) == 1 else 'them'}")
    elif args.nodes is None:
        problems.append("chaos cluster up: --nodes N is required (the number of compute nodes)")
    if args.timeout is not None and not 0 < args.timeout <= 86400:  # NaN fails this too
        problems.append(f"--timeout {args.timeout:g}: expected seconds > 0 (at most a day)")
    if problems:
        return usage("; ".join(problems))

    repo = None if args.no_repo else REPO_ROOT_DEFAULT
    log = (lambda line: err.print(line, highlight=False)) if args.json else (lambda line: out.print(line,
                                                                                                   highlight=False))
    try:
        if args.action == "up" and args.dry_run:
            spec, conf, steps = slurm.dry_run(name, args.nodes, repo)
            if args.json:
                print(json.dumps({"image": slurm.slurm_image_tag(), "slurm_conf": conf,
                                  "steps": [s.__dict__ for s in steps]}, indent=2))
                return EXIT_PASS
            print(f"# image {slurm.slurm_image_tag()} (built first when missing: "
                  f"{' '.join(slurm.apt_download_command(Path('STATUS'), Path('DEBS')))}, then docker build "
                  "--network none FROM the node image)")
            for step in steps:
                print(f"# {step.what}\n{step.command}")
            print(f"# {spec.node_list} share this slurm.conf:\n{conf}", end="")
            return EXIT_PASS
        if args.action == "up":
            result = slurm.up(name, args.nodes, args.timeout or slurm.DEFAULT_TIMEOUT_S, repo, log)
            if args.json:
                print(json.dumps({"state": result.state, "image_s": round(result.image_s, 2),
                                  "image": result.image_method, "containers_s": round(result.containers_s, 2),
                                  "idle_s": round(result.idle_s, 2)}, indent=2))
            else:
                st = result.state
                out.print(f"cluster {name} up: controller {st['controller']['container']}, nodes "
                          f"{st['node_list']} (partition {st['partition']}), user {st['user']['name']}, shared "
                          f"{st['shared']['path']} = {st['shared']['host_path']}, host-loss agent "
                          f"{st['agent']['address']} (pid {st['agent']['pid']})\ntry: {' '.join(st['exec'])} "
                          f"srun -N{len(st['nodes'])} hostname", highlight=False)
                engine = st.get("engine") or {}
                repo_path = (st.get("repo") or {}).get("path")
                argv = engine_run_argv(st, f"{repo_path}/scenarios/slurm/node-crash.yaml")
                if argv is not None:
                    out.print(f"run a scenario on it (the engine on the login node, as {st['user']['name']}): "
                              f"{' '.join(argv)}", highlight=False)
                else:
                    out.print(f"chaos run in the controller: not set up ({engine.get('why', 'unknown')})",
                              highlight=False)
            return EXIT_PASS
        if args.action == "build":
            tag, method, seconds = slurm.build_slurm_image(log)
            out.print(f"image {tag} ({method}, {seconds:.1f}s)", highlight=False)
            return EXIT_PASS
        if args.action == "down":
            removed = slurm.down(name)
            for line in removed:
                log(f"removed {line}")
            out.print(f"cluster {name}: removed {len(removed)} object(s)" if removed else
                      f"no cluster named {name!r} is up: nothing to remove", highlight=False)
            return EXIT_FAIL if any("NOT removed" in line for line in removed) else EXIT_PASS
        info = slurm.status(name)
        if args.json:
            print(json.dumps(info, indent=2))
        elif info is None:
            out.print(f"no cluster named {name!r} is up (`chaos cluster up {args.kind} --nodes N`)", highlight=False)
        else:
            st = info["state"] or {}
            out.print(f"cluster {name}: {'up' if info['complete'] else 'INCOMPLETE (chaos cluster down, then up)'}"
                      f"; state file {info['state_file']}" + (f", created {st['created']}" if st else ""),
                      highlight=False)
            for container, what in sorted(info["containers"].items()):
                host = container.rsplit("-", 1)[-1]
                slurm_state = f", slurm: {info['slurm'][host]}" if host in info["slurm"] else ""
                out.print(f"  {container}: {what}{slurm_state}", highlight=False)
            out.print(f"  agent: {info['agent']}", highlight=False)
        return EXIT_PASS if info is not None and info["complete"] else EXIT_FAIL
    except ValueError as exc:
        return usage(str(exc))
    except slurm.ClusterError as exc:
        _error(str(exc))
        return EXIT_FAIL
    except OSError as exc:  # the docker engine went away or refused mid-command (requests' errors are OSErrors)
        _error(f"the docker engine failed: {exc}; is dockerd running (`docker "
               "info`)? `chaos cluster down` removes what was made")
        return EXIT_FAIL
    except Exception as exc:
        import docker.errors

        if not isinstance(exc, docker.errors.DockerException):
            raise
        _error(f"the docker engine refused: {exc}; `chaos cluster down` "
               "removes what was made")
        return EXIT_FAIL


RUNTIME_HELP = ("run on this runtime instead of the scenario's cluster.runtime (local, netns, docker, slurm or a "
                "plug-in), e.g. `chaos run quickstart --runtime docker`")


GOLDEN_CACHE_HELP = ("where golden runs are cached by content (default: $TORCH_CHAOS_GOLDEN_CACHE, else "
                     "$XDG_CACHE_HOME/torch-chaos/golden or ~/.cache/torch-chaos/golden)")


@contextlib.contextmanager
def _golden_cache(directory: str | None) -> Iterator[None]:
    """``--golden-cache DIR`` is ``TORCH_CHAOS_GOLDEN_CACHE=DIR`` for this command (explore and compare create their
    engines themselves; the golden cache reads the variable)."""
    from chaos.golden import CACHE_ENV  # lazy: the engine, only with --golden-cache

    if directory is None:
        yield
        return
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(Path(directory).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = old


def _projection_options(p: argparse.ArgumentParser) -> None:
    from chaos.analysis.projection import PRESETS  # lazy: numpy, only for the commands that project

    p.add_argument("--mtbf-node", default=None, metavar="DURATION",
                   help="per-node mean time between failures, e.g. 10000h (job MTBF = this / nodes)")
    p.add_argument("--incidents", default=None, metavar="FILE.csv",
                   help="your failure history instead of --mtbf-node: one row per failure, header timestamp"
                        "[,nodes][,downtime]; gives the node MTBF (and its uncertainty) and, with downtimes, the "
                        "recovery")
    p.add_argument("--incidents-nodes", type=int, default=None, metavar="N",
                   help="nodes the job of --incidents ran on, when the CSV has no nodes column")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="a published failure rate instead of --mtbf-node (llama3: 419 unexpected interruptions in "
                        "54 days on 16,384 GPUs, The Llama 3 Herd of Models, 2024)")
    p.add_argument("--job-days", type=float, default=30.0, help="failure-free training time of the projected job "
                   "in days (default 30)")
    p.add_argument("--checkpoint-interval", default=None, metavar="DURATION|Nsteps",
                   help="the job's checkpoint interval, e.g. 30m or 500steps (default: the run's checkpoint_every)")
    p.add_argument("--save-s", "--checkpoint-cost", dest="checkpoint_cost", default=None, metavar="DURATION",
                   help="blocking cost of one checkpoint at your model size and storage (default: the run's measured "
                        "median save)")
    p.add_argument("--recovery-s", "--recovery", dest="recovery", default=None, metavar="DURATION",
                   help="cost of one recovery at scale (default: fitted from several runs, else the run's mean "
                        "measured recovery_s)")
    p.add_argument("--step-s", default=None, metavar="DURATION",
                   help="your step time (default: the run's median step); converts Nsteps intervals")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node, for lost GPU-hours (default 8)")
    p.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="PRICE",
                   help="price of one GPU-hour, for the cost of the lost GPU-hours")
    p.add_argument("--trials", type=int, default=1000, help="Monte Carlo jobs per interval (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")


def _version() -> str:
    """The installed distribution's version (what pip installed), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-chaos")
    except PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torch-chaos", description="Chaos testing for PyTorch training jobs.")
    p.add_argument("--version", action="version", version=f"torch-chaos {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a scenario and measure recovery")
    r.add_argument("scenario", help="a scenario file, or the name of a shipped scenario (see `chaos list`)")
    r.add_argument("--out", default="runs", help="directory for run directories (default: runs)")
    r.add_argument("--dry-run", action="store_true", help="print the resolved plan and run nothing")
    r.add_argument("--json", action="store_true", help="print result.json (or the plan) as JSON")
    r.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    r.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("validate", help="check scenario files and report every error")
    v.add_argument("files", nargs="+")
    v.add_argument("--no-machine", dest="machine", action="store_false",
                   help="check the files only, not whether this machine can run them")
    v.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    v.set_defaults(func=cmd_validate)
    s = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    s.set_defaults(func=cmd_schema)
    ls = sub.add_parser("list", help="list the shipped scenarios")
    ls.add_argument("--long", action="store_true", help="each scenario's whole description")
    ls.set_defaults(func=cmd_list)
    pl = sub.add_parser("plugins", help="list the installed fault kinds, runtimes and rendezvous backends")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_plugins)
    rep = sub.add_parser("report", help="recompute a run's result from its directory; write a report")
    rep.add_argument("run_dir")
    rep.add_argument("--format", type=_format_name({"markdown": "md"}), choices=["text", "html", "md", "json", "junit"],
                     default="text", help="md or markdown: the same Markdown report")
    rep.add_argument("-o", "--output", default=None, help="report path (default: inside the run directory)")
    rep.add_argument("--mtbf", default=None, help="mean time between failures for interval advice, e.g. 6h")
    rep.add_argument("--project-nodes", type=int, default=None, metavar="N",
                     help="add a 'Projection to scale' section for N nodes (see `chaos project --help`)")
    _projection_options(rep)
    rep.set_defaults(func=cmd_report)
    pj = sub.add_parser("project", help="project a run's measured recovery and checkpoint cost to N nodes: "
                        "effective training time, lost hours, best checkpoint interval (Monte Carlo + Young/Daly)")
    pj.add_argument("run_dir", nargs="+", help="a run directory; several runs of the same job at different node "
                    "counts fit how recovery grows with N (the first gives the checkpoint cost and step time)")
    pj.add_argument("--nodes", type=int, required=True, help="nodes of the projected job")
    _projection_options(pj)
    pj.add_argument("--format", type=_format_name({"md": "markdown"}), choices=["text", "json", "markdown"],
                    default="text", help="md or markdown: the same Markdown tables")
    pj.add_argument("--all-intervals", action="store_true", help="list every swept interval, not only the "
                    "current, Young's, Daly's and the best")
    pj.set_defaults(func=cmd_project)
    x = sub.add_parser("explore", help="search for a failing fault plan and shrink it to a minimal reproducer")
    x.add_argument("scenario")
    x.add_argument("--budget", type=_count(1, 10_000), default=10, help="fault plans to generate (each is a real run)")
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--shrink-budget", type=_count(0, 20_000), default=None,
                   help="runs allowed for shrinking (default 2x budget)")
    x.add_argument("--out", default="runs")
    x.add_argument("--json", action="store_true")
    x.add_argument("--no-confirm", action="store_true", help="do not replay the reproducer")
    x.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    x.add_argument("--runtime", default=None, help=RUNTIME_HELP)
    x.set_defaults(func=cmd_explore)
    cmp = sub.add_parser("compare", help="run scenarios side by side and write the comparison table")
    cmp.add_argument("items", nargs="+", help="scenario files (or run directories with --from-runs)")
    cmp.add_argument("--from-runs", action="store_true", help="compare existing run directories, run nothing")
    cmp.add_argument("--out", default="runs", help="directory for run directories")
    cmp.add_argument("--runtime", default=None, help=RUNTIME_HELP + "; every scenario of the comparison")
    cmp.add_argument("-o", "--output", default="reports/generated/compare", help="where the report is written")
    cmp.add_argument("--golden-cache", default=None, metavar="DIR", help=GOLDEN_CACHE_HELP)
    cmp.add_argument("--sweep", default=None, metavar="KIND=V1,V2,...",
                     help="interconnect sweep, e.g. bandwidth=1gbit,100mbit,10mbit or delay=0ms,5ms,20ms: the one-node "
                     "scenario once "
                     "without faults, each multi-node scenario per value on netns with every node's link impaired "
                     "for the whole run; draws speedup against link quality and marks the crossover")
    cmp.set_defaults(func=cmd_compare)
    c = sub.add_parser("cleanup", help="remove what runs whose engine died left behind (processes, containers, "
                       "networks, namespaces, delayers)")
    c.add_argument("--run-id", default=None, help="only this run's objects (live or not)")
    c.add_argument("--all", action="store_true", help="also the objects of runs whose engine is still alive")
    c.set_defaults(func=cmd_cleanup)
    d = sub.add_parser("doctor", help="what this machine supports (docker, root, netem, NFQUEUE, tbf, image), "
                       "with the command that fixes each gap")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)
    im = sub.add_parser("image", help="build the node image for the docker runtime (offline with debootstrap)")
    im.add_argument("action", choices=["build", "tag"])
    im.add_argument("--method", choices=["auto", "debootstrap", "dockerfile"], default="auto",
                    help="auto: dockerfile when python:3.11-slim is already here, else debootstrap (offline)")
    im.add_argument("--force", action="store_true", help="rebuild even when the image for these inputs exists")
    im.set_defaults(func=cmd_image)
    cl = sub.add_parser("cluster", help="bring a Slurm cluster in containers up or down (for tests, CI, and "
                        "anyone without a cluster)")
    cl.add_argument("action", choices=["up", "down", "status", "build"],
                    help="up: build the image if needed, start it, wait until every node is idle; down: remove "
                    "everything it made; status: what is up; build: only the image")
    cl.add_argument("kind", nargs="?", default="slurm", choices=["slurm"], help="the kind of cluster (slurm)")
    cl.add_argument("--nodes", type=int, default=None, metavar="N", help="compute nodes (up; required)")
    cl.add_argument("--name", default=None, help="the cluster's name (default: the kind); several can be up at once")
    cl.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="seconds to wait for every node to be idle (up; default 60)")
    cl.add_argument("--no-repo", action="store_true", help="do not bind-mount this repository read-only into the "
                    "containers (up)")
    cl.add_argument("--dry-run", action="store_true", help="print what `up` would run (docker lines, slurm.conf) "
                    "and do nothing")
    cl.add_argument("--json", action="store_true", help="machine-readable output (up, status, --dry-run)")
    cl.set_defaults(func=cmd_cluster)
    return p


def _directory_problem(path: str) -> str | None:
    """Why ``path`` cannot hold new directories (it or a parent is a file, or it is not writable), or None: said
    before anything runs, instead of a traceback once the run directory is made."""
    def present(a: Path) -> bool:  # lstat: a dangling link is there too; any error but "no such file" is said
        try:
            a.lstat()
        except (FileNotFoundError, NotADirectoryError):  # the latter: a parent is a file, said when reached
            return False
        return True

    try:
        p = Path(path).absolute()
        existing = next((a for a in (p, *p.parents) if present(a)), None)
        if existing is None:
            return None
        if not existing.is_dir():
            return (f"{existing} is not a directory" if existing == p
                    else f"{existing} (a parent of it) is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{existing} is not writable by this user"
    except OSError as exc:  # a name too long, a parent this user may not enter
        return exc.strerror or str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option, attr in (("--out", "out"), ("--golden-cache", "golden_cache")):
        value = getattr(args, attr, None)
        problem = _directory_problem(value) if value is not None else None
        if problem:
            _error(f"{option} {value}: {problem}; name a directory to create or to write in")
            return EXIT_USAGE
    try:
        with _golden_cache(getattr(args, "golden_cache", None)):
            return int(args.func(args))
    except ScenarioInvalid as exc:
        _scenario_errors(exc)
        return EXIT_USAGE
    except BrokenPipeError:  # `chaos ... | head`: the reader left early; nothing went wrong here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return EXIT_PASS
    except KeyboardInterrupt:  # explore / compare interrupted: every run was already torn down
        err.print("interrupted", highlight=False)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
