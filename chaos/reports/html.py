"""One self-contained HTML file: inline CSS and SVG plots, no script, no external request."""

from __future__ import annotations

from html import escape

from chaos.analysis.verdict import Verdict
from chaos.paths import shown
from chaos.reports.bounds import bounds_lines
from chaos.reports.markup import render_description
from chaos.reports.model import Report
from chaos.reports.plots import figures, to_svg
from chaos.reports.projection import render_html as projection_html
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
    lanes_note,
    limit_text,
    slow_node_line,
    step_timing_node_rows,
    step_timing_rows,
    summary_rows,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f4f4f4}.banner{padding:.8em 1em;border-radius:6px;
font-size:1.2em;font-weight:600}.pass{background:#e3f6e3;color:#155d15}.fail,.hung,.restart_loop{background:#fde2e2;
color:#8a1010}.error{background:#f3e3f6;color:#5d1570}.ok{color:#155d15}.bad{color:#8a1010;font-weight:600}
.na{color:#777}.bound{margin:.3em 0;padding:.2em .8em;border-left:4px solid}.held{border-color:#155d15}
.warn{border-color:#c88a00;background:#fff7e0}.failed{border-color:#8a1010;background:#fde2e2}
.description{margin:1em 0}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}code{background:#f4f4f4;padding:0 .2em}
"""


def _table(header: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ok(ok: bool | None) -> str:
    if ok is None:
        return '<span class="na">not checked</span>'
    return '<span class="ok">ok</span>' if ok else '<span class="bad">FAILED</span>'


def _mode(verdict: Verdict) -> str:
    """Which comparison a verdict made (``bitwise``, ``within_noise``, ...), beside its outcome."""
    mode = verdict.get("mode")
    return f" ({escape(mode)})" if mode and mode != "not_checked" else ""


def _bound_class(line: str) -> str:
    """A bounds line's colour: held (green), failed (red), a figure no bound gated (amber)."""
    return "failed" if line.startswith("failed:") else "warn" if "no bound set" in line else "held"


def render_html(report: Report) -> str:
    r = report.result
    figs = {name: to_svg(fig) for name, fig in figures(report).items()}
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>torch-chaos: {escape(r.scenario)}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>torch-chaos resilience report: {escape(r.scenario)}</h1>",
             f"<div class='banner {escape(r.verdict)}'>{escape(r.verdict.upper())} — {escape(r.why)}</div>",
             f"<p>run <code>{escape(r.run_id)}</code> · {escape(report.scenario.cluster.mode)} · "
             f"{report.scenario.cluster.nodes} node(s) × {report.scenario.cluster.procs_per_node} process(es) · "
             f"runtime {escape(report.scenario.cluster.runtime)}</p>",
             *(f"<p class='bound {_bound_class(line)}'>{escape(line)}</p>" for line in bounds_lines(r)),
             f"<div class=description>{render_description(report.scenario.description)}</div>",
             "<h2>Summary</h2>", _table(("figure", "value"), summary_rows(report)),
             "<h2>Timeline</h2>", f"<figure id=timeline>{figs['timeline']}</figure>"]
    if (line := lanes_note(report)) is not None:
        parts.append(f"<p class=na>{escape(line)}</p>")
    if "loss" in figs:
        parts += ["<h2>Loss against the golden run</h2>", f"<figure id=loss>{figs['loss']}</figure>"]
        if (line := divergence_line(report)) is not None:
            parts.append(f"<p>{escape(line)}</p>")
    parts += ["<h2>Faults</h2>", _table(FAULT_COLUMNS, fault_rows(report))]
    if report.breakdowns:
        parts.append(f"<h2>Recovery breakdown</h2><p>{escape(BREAKDOWN_INTRO)}</p>")
        for b in report.breakdowns:
            notes = "".join(f"<li>{escape(line)}</li>" for line in breakdown_notes(b))
            parts.append(f"<p>fault {b.fault} ({escape(b.kind)}): recovery {fmt(b.recovery_s, ' s')}</p>"
                         + _table(("phase", "seconds", "share"), breakdown_rows(b))
                         + (f"<ul>{notes}</ul>" if notes else ""))
    timed = [f for f in r.faults if f.extra.get("step_timing")]
    if timed:
        parts.append(f"<h2>Per-rank step timing</h2><p>{escape(STEP_TIMING_INTRO)}</p>")
        for f in timed:
            parts.append(f"<p>fault {f.id} ({escape(f.kind)} on {escape(str(f.target))}): "
                         f"{escape(slow_node_line(f) or '')}</p>"
                         + _table(STEP_TIMING_COLUMNS, step_timing_rows(f.extra["step_timing"]))
                         + (_table(("node", *STEP_TIMING_COLUMNS[2:]), node_rows)
                            if (node_rows := step_timing_node_rows(f.extra["step_timing"])) else ""))
    exp_rows = "".join(f"<tr><td>{escape(x.name)}{' (implicit)' if x.implicit else ''}</td>"
                       f"<td>{escape(limit_text(x.limit))}</td><td>{escape(fmt(x.value))}</td>"
                       f"<td>{_ok(x.ok)}</td></tr>" for x in r.expectations)
    parts.append("<h2>Expectations</h2><table><thead><tr><th>expectation</th><th>limit</th><th>measured</th>"
                 f"<th>outcome</th></tr></thead><tbody>{exp_rows}</tbody></table>")
    ck_rows = "".join(f"<tr><td>{escape(name)}</td><td>{_ok(v.ok)}{_mode(v)}</td>"
                      f"<td>{escape(v.why)}</td>"
                      "</tr>" for name, v in r.checkpoint.items())
    parts.append("<h2>Checkpoint correctness</h2><table><thead><tr><th>verdict</th><th>result</th><th>why</th>"
                 f"</tr></thead><tbody>{ck_rows}</tbody></table>")
    advice = advice_lines(report)
    if advice:
        parts.append("<h2>Checkpoint interval</h2>" + "".join(f"<p>{escape(line)}</p>" for line in advice))
    if report.projection is not None:
        parts.append(projection_html(report.projection))
    parts += ["<h2>Environment</h2>", _table(("setting", "value"), environment_rows(report)),
              f"<p class=na>Recomputed from <code>{escape(shown(report.run_dir))}</code> "
              f"(events.jsonl) by torch-chaos.</p></body></html>"]
    return "\n".join(parts)
