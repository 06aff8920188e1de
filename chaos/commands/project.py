"""``chaos project RUN_DIR... --nodes N``: a run's measured recovery and checkpoint cost projected to N nodes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chaos.analysis.projection import ProjectionError
from chaos.commands import error
from chaos.commands.rundirs import analysed, is_run_dir, projected
from chaos.reports.projection import render_markdown, render_text
from chaos.run_result import EXIT_FAIL, EXIT_PASS, EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """Project a run's measured recovery and checkpoint cost to N nodes under a failure model."""

    run_dirs = [Path(d) for d in args.run_dir]
    if not all(is_run_dir(d) for d in run_dirs):
        return EXIT_USAGE
    analyses = [analysed(d) for d in run_dirs]
    if any(a is None for a in analyses):
        return EXIT_FAIL
    try:
        projection = projected(args, analyses[0], args.nodes, tuple(analyses))
    except ProjectionError as exc:
        error(str(exc))
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(projection.to_dict(), indent=2, default=str))
    elif args.format == "markdown":
        print(render_markdown(projection, level=1, full=args.all_intervals))
    else:
        print(render_text(projection, full=args.all_intervals), end="")
    return EXIT_PASS
