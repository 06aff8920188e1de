"""Reports from a run directory alone: HTML, Markdown, JSON and JUnit XML (``chaos report``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from chaos.paths import write_output

if TYPE_CHECKING:
    from chaos.analysis.projection import Projection
    from chaos.analysis.run import RunAnalysis

FORMATS = ("html", "md", "json", "junit")


def write_report(run: str | Path | RunAnalysis, fmt: str = "html", out: str | Path | None = None,
                 mtbf_s: float | None = None, projection: Projection | None = None,
                 out_named_by_user: bool | None = None) -> Path:
    """Write one report of a run; returns the report's path.

    ``run`` is the run directory (its history is analysed) or an analysis already made (not redone).
    ``projection`` (``chaos.analysis.projection``) adds the "Projection to scale" section.
    ``out_named_by_user`` (default: whether ``out`` is given): the user named that path, so a link there is
    written through (``-o /dev/stdout``); a name torch-chaos chose (compare's per-run reports) replaces a link.
    """
    by_user = out is not None if out_named_by_user is None else out_named_by_user
    # lazy: matplotlib may be absent where the engine runs (a Slurm login node): the report fails, not the run
    from chaos.reports.model import build_report

    report = build_report(run, mtbf_s=mtbf_s, projection=projection)
    run_dir = report.run_dir
    if fmt == "html":
        # lazy: matplotlib may be absent where the engine runs (a Slurm login node): the report fails, not the run
        from chaos.reports.html import render_html

        path = Path(out) if out else run_dir / "report.html"
        write_output(path, render_html(report), named_by_user=by_user)
    elif fmt == "md":
        # lazy: matplotlib may be absent where the engine runs (a Slurm login node): the report fails, not the run
        from chaos.reports.markdown import render_markdown

        path = Path(out) if out else run_dir / "report.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_output(path, render_markdown(report, path.parent, path.stem), named_by_user=by_user)
    elif fmt == "json":
        import json

        path = Path(out) if out else run_dir / "report.json"
        write_output(path, json.dumps(report.to_json(), indent=2, default=str) + "\n", named_by_user=by_user)
    elif fmt == "junit":
        # lazy: matplotlib may be absent where the engine runs (a Slurm login node): the report fails, not the run
        from chaos.reports.junit import render_junit

        path = Path(out) if out else run_dir / "report.junit.xml"
        write_output(path, render_junit(report), named_by_user=by_user)
    else:
        raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return path
