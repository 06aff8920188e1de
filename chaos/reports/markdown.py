"""Markdown for pull requests and wikis: the HTML report's content, with PNG plots written beside it."""

from __future__ import annotations

from pathlib import Path

from chaos.analysis.federated import text_lines
from chaos.paths import shown, write_output
from chaos.reports.bounds import bounds_lines
from chaos.reports.model import Report
from chaos.reports.plots import figures, to_png
from chaos.reports.projection import render_markdown as projection_markdown
from chaos.reports.text import (
    BREAKDOWN_INTRO,
    FAULT_COLUMNS,
    STEP_TIMING_COLUMNS,
    STEP_TIMING_INTRO,
    advice_lines,
    breakdown_notes,
    breakdown_rows,
    divergence_line,
    environment_rows,
    fault_rows,
    fmt,
    limit_text,
    slow_node_line,
    step_timing_node_rows,
    step_timing_rows,
    summary_rows,
    verdict_text,
)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: Report, directory: Path, stem: str) -> str:
    r = report.result
    out = [f"# torch-chaos resilience report: {r.scenario}", "",
           f"**{r.verdict.upper()}** — {r.why}", "", *[f"- {line}" for line in bounds_lines(r)], "",
           f"run `{r.run_id}` · {report.scenario.cluster.mode} · {report.scenario.cluster.nodes} node(s) · "
           f"runtime {report.scenario.cluster.runtime}", "", report.scenario.description.strip(), "",
           "## Summary", "", _table(("figure", "value"), summary_rows(report)), ""]
    for name, fig in figures(report).items():
        png = directory / f"{stem}-{name}.png"
        write_output(png, to_png(fig))
        title = "Timeline" if name == "timeline" else "Loss against the golden run"
        out += [f"## {title}", "", f"![{name}]({png.name})", ""]
        if name == "loss" and (line := divergence_line(report)) is not None:
            out += [line, ""]
    out += ["## Faults", "", _table(FAULT_COLUMNS, fault_rows(report)), ""]
    if report.breakdowns:
        out += ["## Recovery breakdown", "", BREAKDOWN_INTRO, ""]
        for b in report.breakdowns:
            out += [f"fault {b.fault} ({b.kind}): recovery {fmt(b.recovery_s, ' s')}", "",
                    _table(("phase", "seconds", "share"), breakdown_rows(b)), ""]
            out += [*(f"- {line}" for line in breakdown_notes(b)), ""] if breakdown_notes(b) else []
    timed = [f for f in r.faults if f.extra.get("step_timing")]
    if timed:
        out += ["## Per-rank step timing", "", STEP_TIMING_INTRO, ""]
        for f in timed:
            out += [f"fault {f.id} ({f.kind} on {f.target}): {slow_node_line(f)}", "",
                    _table(STEP_TIMING_COLUMNS, step_timing_rows(f.extra["step_timing"])), ""]
            if node_rows := step_timing_node_rows(f.extra["step_timing"]):
                out += [_table(("node", *STEP_TIMING_COLUMNS[2:]), node_rows), ""]
    if r.federated:  # a federated run's rounds (chaos.analysis.federated)
        out += ["## Federated rounds", "", "```", *text_lines(dict(r.federated)), "```", ""]
    out += ["## Expectations", "", _table(("expectation", "limit", "measured", "outcome"), [
        [x.name, limit_text(x.limit), fmt(x.value), "ok" if x.ok else "FAILED"]
        for x in r.expectations]), ""]
    out += ["## Checkpoint correctness", "", _table(("verdict", "result", "why"), [
        [name, verdict_text(v), v.why]
        for name, v in r.checkpoint.items()]), ""]
    advice = advice_lines(report)
    if advice:
        out += ["## Checkpoint interval", "", *[f"- {line}" for line in advice], ""]
    if report.projection is not None:
        out += [projection_markdown(report.projection, level=2)]
    out += ["## Environment", "", _table(("setting", "value"), environment_rows(report)), "",
            f"_Recomputed from `{shown(report.run_dir)}` (events.jsonl) by torch-chaos._", ""]
    return "\n".join(out)
