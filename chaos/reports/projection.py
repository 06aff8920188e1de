"""Wording of a projection to scale (``chaos project``, the reports' "Projection to scale" section).

Presentation only: every number comes from :class:`chaos.analysis.projection.Projection`. Every sentence that
concludes something carries the number it rests on.
"""

from __future__ import annotations

from chaos.analysis.projection import HOUR, NEAR_BEST, IntervalFigures, Projection
from chaos.paths import shown

RESULT_COLUMNS = ("interval", "which", "ETTR (Monte Carlo, 95% CI)", "ETTR closed form (Daly, exact)",
                  "ETTR Young 1st order", "lost h per job (p95)", "lost h per wall-day", "failures per job")


def duration(seconds: float) -> str:
    """Seconds in the unit a person reads best: ms, s, min or h."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / HOUR:.2f} h"


def _steps(p: Projection, seconds: float) -> str:
    step = p.measured.step_s
    return f" (≈ {max(1, round(seconds / step)):,} steps)" if step else ""


def input_rows(p: Projection) -> list[tuple[str, str, str]]:
    m = p.measured
    rows = [("recovery R", duration(m.recovery_s), m.recovery_source),
            ("checkpoint cost C", duration(m.checkpoint_cost_s), m.checkpoint_cost_source),
            ("step time", duration(m.step_s) if m.step_s else "not measured", "median step of the run"),
            ("checkpoint interval τ", duration(m.interval_s) if m.interval_s else "—", m.interval_source)]
    rows += [(f"lost work, fault {f.fault}", f"{f.lost_steps} steps, "
              + (duration(f.lost_work_s) if f.lost_work_s is not None else "—"),
              f"measured; resumed from step {f.resumed_from}") for f in m.lost]
    rows += [("nodes N", f"{p.model.nodes:,}", "given (--nodes)"),
             ("per-node MTBF", f"{p.model.node_mtbf_s / HOUR:,.0f} h", p.model.source),
             ("job MTBF M", f"{p.model.job_mtbf_s / HOUR:.3g} h", "per-node MTBF / N"),
             ("job length", f"{p.job_days:g} days of failure-free training", "--job-days")]
    return rows


def _which(p: Projection, f: IntervalFigures) -> str:
    names = []
    if p.current is not None and f.interval_s == p.current.interval_s:
        names.append("current")
    if f.interval_s == p.young_s:
        names.append("Young √(2CM)")
    if f.interval_s == p.daly_s:
        names.append("Daly")
    if f is p.best:
        names.append("best in sweep")
    return ", ".join(names)


def result_row(p: Projection, f: IntervalFigures) -> list[str]:
    lo, hi = f.ettr_ci95
    return [duration(f.interval_s) + _steps(p, f.interval_s), _which(p, f), f"{f.ettr:.5f} [{lo:.5f}, {hi:.5f}]",
            f"{f.ettr_closed_form:.5f}", f"{f.ettr_young:.5f}" + ("" if f.first_order_applies else " (n/a)"),
            f"{f.lost_hours:.2f} ({f.lost_hours_p95:.2f})", f"{f.lost_hours_per_day:.3f}", f"{f.failures:.1f}"]


def result_rows(p: Projection, full: bool = False) -> list[list[str]]:
    """The named intervals (current, Young, Daly, best); every swept interval with ``full``."""
    rows = p.sweep if full else [f for f in p.sweep if _which(p, f)]
    return [result_row(p, f) for f in rows]


def conclusions(p: Projection) -> list[str]:
    b, m = p.best, p.model
    lines = [f"Best interval in the sweep ({len(p.sweep)} intervals from {duration(p.sweep[0].interval_s)} to "
             f"{duration(p.sweep[-1].interval_s)}): {duration(b.interval_s)}{_steps(p, b.interval_s)}, projected ETTR "
             f"{b.ettr:.5f} (95% CI {b.ettr_ci95[0]:.5f}–{b.ettr_ci95[1]:.5f}). Swept intervals from "
             f"{duration(p.near_best[0])} to {duration(p.near_best[1])} stay within {NEAR_BEST * 100:g} point of "
             "that ETTR." + (" The best is at the edge of the sweep: the optimum may lie beyond it, or the "
                             "intervals' ETTRs differ by less than the Monte Carlo's noise (see the CIs)."
                             if b is p.sweep[0] or b is p.sweep[-1] else ""),
             f"Closed-form optimum for C = {duration(p.measured.checkpoint_cost_s)}, M = {m.job_mtbf_s / HOUR:.3g} h: "
             f"Young √(2CM) = {duration(p.young_s)}, Daly = {duration(p.daly_s)}."]
    c = p.current
    if c is not None:
        lines.append(f"At the current interval ({duration(c.interval_s)}): ETTR {c.ettr:.5f}; expected lost "
                     f"{c.lost_hours:.2f} h per {p.job_days:g}-day job ({c.lost_node_hours:,.0f} node-hours; "
                     f"95th percentile {c.lost_hours_p95:.2f} h): checkpointing {c.checkpoint_hours:.2f} h, redone "
                     f"training {c.rework_hours:.2f} h, interrupted saves {c.wasted_save_hours:.3f} h, recovery "
                     f"{c.recovery_hours:.2f} h over {c.failures:.1f} failures.")
        gain = b.ettr - c.ettr
        lines.append(f"Best against current: ETTR {b.ettr:.5f} vs {c.ettr:.5f} ({gain * 100:+.3f} points, "
                     f"{(c.lost_hours - b.lost_hours):+.2f} h per job saved)"
                     + (f"; the current interval is within {NEAR_BEST * 100:g} point of the best."
                        if gain <= NEAR_BEST else "."))
    else:
        lines.append(f"At the best interval: expected lost {b.lost_hours:.2f} h per {p.job_days:g}-day job "
                     f"({b.lost_node_hours:,.0f} node-hours), over {b.failures:.1f} failures. The current interval "
                     "is not known: give --checkpoint-interval to project it.")
    k = p.check
    lines.append(f"Check against the closed form: the Monte Carlo's ETTR differs from Daly's exact expected value by "
                 f"at most {k['max_abs_difference']:.2g} over the {k['intervals']} intervals; the closed form lies "
                 f"inside the Monte Carlo's 95% CI for {k['closed_form_inside_ci95']} of them.")
    lines.append(f"Young's first order (1 − C/τ − (τ+C)/2M − R/M) is marked n/a where (τ + C)/M or R/M ≥ 0.1; "
                 f"here R/M = {p.measured.recovery_s / m.job_mtbf_s:.2g}.")
    return lines


def header(p: Projection) -> str:
    return (f"Projection of {shown(p.measured.run_dir)} (measured on {p.measured.run_nodes} node(s)) to "
            f"{p.model.nodes:,} nodes: Monte Carlo of {p.trials:,} jobs per interval (seed {p.seed}), "
            f"{p.runtime_s:.2f} s.")


def _text_table(header_row: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, str, str]]) -> str:
    cells = [list(header_row)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header_row))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_text(p: Projection, full: bool = False) -> str:
    out = [header(p), "", "Inputs", _text_table(("input", "value", "source"), input_rows(p)), ""]
    if p.model.derivation:
        out += ["Failure rate derivation", *[f"  {line}" for line in p.model.derivation], ""]
    out += ["Projection", _text_table(RESULT_COLUMNS, result_rows(p, full)), ""]
    out += ["Conclusions", *[f"- {line}" for line in conclusions(p)], ""]
    out += ["Assumptions", *[f"- {line}" for line in p.assumptions]]
    return "\n".join(out) + "\n"


def _md_cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header_row: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, str, str]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in header_row) + " |", "|" + "---|" * len(header_row)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(p: Projection, level: int = 2, full: bool = False) -> str:
    h = "#" * level
    out = [f"{h} Projection to scale", "", header(p), "", f"{h}# Inputs", "",
           _md_table(("input", "value", "source"), input_rows(p)), ""]
    if p.model.derivation:
        out += [f"{h}# Failure rate derivation", "", *[f"- {line}" for line in p.model.derivation], ""]
    out += [f"{h}# Projection", "", _md_table(RESULT_COLUMNS, result_rows(p, full)), ""]
    out += [f"{h}# Conclusions", "", *[f"- {line}" for line in conclusions(p)], ""]
    out += [f"{h}# Assumptions", "", *[f"- {line}" for line in p.assumptions], ""]
    return "\n".join(out)


def render_html(p: Projection) -> str:
    from html import escape

    def table(header_row: tuple[str, ...], rows: list[list[str]] | list[tuple[str, str, str]]) -> str:
        head = "".join(f"<th>{escape(x)}</th>" for x in header_row)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def items(lines: list[str]) -> str:
        return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"

    parts = ["<h2 id=projection>Projection to scale</h2>", f"<p>{escape(header(p))}</p>",
             "<h3>Inputs</h3>", table(("input", "value", "source"), input_rows(p))]
    if p.model.derivation:
        parts += ["<h3>Failure rate derivation</h3>", items(list(p.model.derivation))]
    parts += ["<h3>Projection</h3>", table(RESULT_COLUMNS, result_rows(p)),
              "<h3>Conclusions</h3>", items(conclusions(p)), "<h3>Assumptions</h3>", items(p.assumptions)]
    return "\n".join(parts)
