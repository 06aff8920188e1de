"""``chaos report RUN_DIR``: recompute a run's result from its directory and write a report."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import chaos.analysis.run as analysis_run
from chaos.analysis.projection import ProjectionError
from chaos.commands import err, error, out
from chaos.commands.rundirs import is_run_dir, is_run_record, projected
from chaos.console import summary
from chaos.loading import ScenarioInvalid
from chaos.paths import shown
from chaos.reports import write_report
from chaos.reports.model import build_report
from chaos.reports.projection import render_text
from chaos.reports.text import advice_lines
from chaos.run_result import EXIT_FAIL, EXIT_USAGE, exit_code_for
from chaos.scenario import parse_duration


def main(args: argparse.Namespace) -> int:
    """Analyse the run directory once, rewrite its result.json (a read-only copy is still reported), then print the
    summary or write the report; the exit code is the run's verdict's."""
    run_dir = Path(args.run_dir)
    if not is_run_dir(run_dir):
        return EXIT_USAGE
    try:
        mtbf = parse_duration(args.mtbf) if args.mtbf is not None else None
        if mtbf is not None and not (isinstance(mtbf, float) and math.isfinite(mtbf) and mtbf > 0):
            raise ValueError(f"expected a positive duration such as 6h, got {args.mtbf!r}")
    except ValueError as exc:
        error(f"--mtbf: {exc}")
        return EXIT_USAGE
    if args.project_nodes is None and (args.mtbf_node or args.preset or args.incidents):
        error("--mtbf-node / --preset / --incidents: a projection needs --project-nodes N")
        return EXIT_USAGE
    if args.output and is_run_record(Path(args.output), run_dir):
        error(f"-o {args.output}: that is the run's own {Path(args.output).name}, which the report is computed "
              "from; name another file")
        return EXIT_USAGE
    try:
        analysis = analysis_run.analyze_run(run_dir)  # once: result.json and the report present the same analysis
        try:
            projection = projected(args, analysis, args.project_nodes) if args.project_nodes is not None else None
        except ProjectionError as exc:
            error(str(exc).replace("--nodes:", "--project-nodes:", 1))  # `chaos report`'s name for `project`'s option
            return EXIT_USAGE
        try:
            # through the module, looked up at the call: a test stands in for the write (a read-only run)
            result = analysis_run.write_result(analysis)
        except OSError as exc:  # a read-only copy of a run is still worth a report
            result = analysis.result
            err.print(f"note: {run_dir / 'result.json'} not rewritten ({exc.strerror or exc}); the report below "
                      "is computed from the history all the same", highlight=False)
        if args.format == "text":
            summary(result, out)
            if mtbf is not None:  # the interval advice the other formats carry, for the MTBF asked about
                for line in advice_lines(build_report(analysis, mtbf_s=mtbf)):
                    out.print(line, highlight=False)
            if projection is not None:
                out.print(render_text(projection), highlight=False, markup=False)
        else:
            try:
                path = write_report(analysis, args.format, args.output, mtbf_s=mtbf, projection=projection)
            except OSError as exc:
                where = args.output or f"the {args.format} report in {run_dir}"
                error(f"cannot write {where}: {exc.strerror or exc}; -o/--output names another file")
                return EXIT_USAGE
            out.print(f"{args.format} report: {shown(path)}", highlight=False)
    except ScenarioInvalid:
        raise  # scenario.yaml itself is damaged: file:line errors, exit 2
    except Exception as exc:  # a damaged history must give a message, never a traceback
        error(f"{shown(run_dir)}: cannot analyse this run directory "
              f"({type(exc).__name__}: {exc}); `chaos report` reads events.jsonl, scenario.yaml "
              "and golden.json")
        return EXIT_FAIL
    return exit_code_for(result["verdict"])
