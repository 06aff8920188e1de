"""Wording of a projection to scale (``chaos project``, the reports' "Projection to scale" section).

Presentation only: every number comes from :class:`chaos.analysis.projection.Projection`. Every sentence that
concludes something carries the number it rests on.
"""

from __future__ import annotations

import math

from chaos.analysis.projection import ASSUMED, HOUR, MEASURED, NEAR_BEST, SUPPLIED, IntervalFigures, Projection
from chaos.analysis.projection_uncertainty import FACTORS, JOB_DRAWS, SensitivityRow
from chaos.paths import shown

INPUT_COLUMNS = ("input", "value", "origin", "how")

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


def input_rows(p: Projection) -> list[tuple[str, str, str, str]]:
    """Every input with the value used and its origin: measured here, supplied, assumed (or extrapolated)."""
    m, h = p.measured, p.headline
    rows = [("recovery R", duration(m.recovery_s), m.recovery_origin, m.recovery_source),
            ("checkpoint cost C", duration(m.checkpoint_cost_s), m.checkpoint_cost_origin, m.checkpoint_cost_source),
            ("step time", duration(m.step_s) if m.step_s else "not measured", m.step_origin if m.step_s else "—",
             "--step-s" if m.step_origin == SUPPLIED else f"median step of the run on {m.run_nodes} node(s)"),
            ("checkpoint interval τ", duration(m.interval_s) if m.interval_s else "—",
             m.interval_origin if m.interval_s else "—", m.interval_source)]
    rows += [(f"lost work, fault {f.fault}", f"{f.lost_steps} steps, "
              + (duration(f.lost_work_s) if f.lost_work_s is not None else "—"), MEASURED,
              f"resumed from step {f.resumed_from}") for f in m.lost]
    rows += [("nodes N", f"{p.model.nodes:,}", SUPPLIED, "--nodes"),
             ("per-node MTBF", f"{p.model.node_mtbf_s / HOUR:,.0f} h", p.model.origin, p.model.source),
             ("job MTBF M", f"{p.model.job_mtbf_s / HOUR:.3g} h", p.model.origin, "per-node MTBF / N"),
             ("job length", f"{p.job_days:g} days of failure-free training",
              SUPPLIED if p.job_days != 30.0 else ASSUMED, "--job-days" + (" (default)" if p.job_days == 30.0 else ""))]
    if h is not None:
        rows.append(("GPUs per node", str(h.gpus_per_node), SUPPLIED if h.gpus_per_node != 8 else ASSUMED,
                     "--gpus-per-node" + (" (default)" if h.gpus_per_node == 8 else "")))
        rows.append(("price per GPU-hour", f"{h.price_per_gpu_hour:g}" if h.price_per_gpu_hour is not None else "—",
                     SUPPLIED if h.price_per_gpu_hour is not None else "—",
                     "--price-per-gpu-hour" if h.price_per_gpu_hour is not None else "not given: no cost computed"))
    return rows


def _span(lo: float, hi: float, fmt: str = ".2f") -> str:
    return f"{lo:{fmt}}–{hi:{fmt}}"


def headline_lines(p: Projection) -> list[str]:
    """The answer in a few sentences, each with its interval and what that interval covers."""
    h = p.headline
    if h is None:
        return []

    def within(span: tuple[float, float], fmt: str = ".2f", suffix: str = "") -> str:
        return f" (95% interval {_span(*span, fmt)}{suffix})" if h.covers else ""

    mc = p.at(h.interval_s)
    lines = toy_flag(p)
    lines += [f"At {h.which}, {duration(h.interval_s)}{_steps(p, h.interval_s)}, a {p.job_days:g}-day job on "
              f"{h.nodes:,} nodes loses {h.lost_hours:.2f} h expected{within(h.lost_hours_95, suffix=' h')}; "
              f"effective training time ratio {h.ettr:.4f}{within(h.ettr_95, '.4f')}. (Daly's exact closed form"
              + (f"; the Monte Carlo below gives {mc.lost_hours:.2f} h" if mc is not None else "") + ".)",
              f"Lost GPU-hours per job: {h.gpu_hours:,.0f}{within(h.gpu_hours_95, ',.0f')} = lost hours × "
              f"{h.nodes:,} nodes × {h.gpus_per_node} GPUs"
              + (f"; their cost: {h.cost:,.0f}{within(h.cost_95, ',.0f')} at {h.price_per_gpu_hour:g} per GPU-hour."
                 if h.cost is not None and h.cost_95 is not None else "; give --price-per-gpu-hour for their cost.")]
    if h.covers:
        lines.append(f"The 95% interval is the spread of the expected lost hours over {h.draws:,} draws of the "
                     f"uncertain inputs: {'; '.join(h.covers)}. Taken as exact: {', '.join(h.exact)}.")
    else:
        lines.append("No interval on the expected value: no input here carries a known uncertainty ("
                     + ", ".join(h.exact) + " are single values). Several restarts, several saves, runs at several "
                     "node counts or an incident history (--incidents) give it one.")
    if math.isnan(h.job_lost_hours_95[0]):
        lines.append("Single jobs not simulated: with every draw of the inputs the job barely progresses.")
    else:
        lines.append(f"A single job (its own random failures on top of the inputs' uncertainty; {JOB_DRAWS} "
                     f"simulated jobs): 95% of them lose {_span(*h.job_lost_hours_95)} h"
                     + (f" ({h.skipped_draws} draws left out: the job barely progresses with them)"
                        if h.skipped_draws else "") + ".")
    if p.measured.scaling_note and p.measured.recovery_origin != MEASURED:
        lines.append(p.measured.scaling_note + ".")
    return lines


def toy_flag(p: Projection) -> list[str]:
    """The inputs this run measured at its own size and the projection takes as is at N: said first, since a small
    run's seconds read as a big job's measurement otherwise."""
    m = p.measured
    if p.model.nodes == m.run_nodes:
        return []
    taken = [f"{name} ({duration(value)})" for name, value, origin in (
        ("recovery R", m.recovery_s, m.recovery_origin),
        ("checkpoint cost C, at this run's model size and storage", m.checkpoint_cost_s, m.checkpoint_cost_origin),
        ("step time", m.step_s, m.step_origin), ("checkpoint interval τ", m.interval_s, m.interval_origin))
        if origin == MEASURED and value]
    if not taken:
        return []
    return [f"FLAG: taken as measured on this {m.run_nodes}-node run, not at {p.model.nodes:,} nodes: "
            + ", ".join(taken) + ". Supply yours (--recovery-s or runs at several node counts, --save-s, --step-s, "
            "--checkpoint-interval) to project your job rather than this one."]


SENSITIVITY_COLUMNS = ("input ×0.5 / ×2", "value used", *[f"lost h ×{f:g}" for f in FACTORS],
                       *[f"ETTR ×{f:g}" for f in FACTORS], "note")


def sensitivity_rows(p: Projection) -> list[list[str]]:
    def value(r: SensitivityRow) -> str:
        return duration(r.value) if r.unit == "s" else f"{r.value:,.0f} {r.unit}"

    return [[r.input, value(r), *[f"{x:.2f}" for x in r.lost_hours], *[f"{x:.4f}" for x in r.ettr], r.note]
            for r in p.sensitivity]


def scaling_lines(p: Projection) -> list[str]:
    """How recovery and rendezvous grow with N, from the runs given, or why that is not known."""
    m = p.measured
    if m.recovery_fit is None:
        return [(m.scaling_note or f"Recovery is measured at the run's own size ({m.run_nodes} node(s))")
                + ". One run says nothing about how recovery grows with N." if m.recovery_origin == MEASURED else
                f"Recovery as {m.recovery_origin}; no runs at several node counts were given to fit its growth."]
    lines = ["points (nodes, recovery s): " + ", ".join(f"({n}, {v:.2f})" for n, v in m.recovery_fit.points),
             m.recovery_fit.describe(p.model.nodes) + ("" if m.recovery_origin.startswith("extrapolated")
                                                       else f" (not used: recovery {m.recovery_origin})")]
    if m.rendezvous_fit is not None:
        lines.append(m.rendezvous_fit.describe(p.model.nodes) + " (the rendezvous phase of the recovery breakdown; "
                     "shown, not used separately)")
    else:
        lines.append("rendezvous: not fitted (its phase was measured at fewer than two node counts)")
    return lines


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


def _text_table(header_row: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, ...]]) -> str:
    cells = [list(header_row)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header_row))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_text(p: Projection, full: bool = False) -> str:
    out = [header(p), "", "Headline", *[f"- {line}" for line in headline_lines(p)], "",
           "Inputs", _text_table(INPUT_COLUMNS, input_rows(p)), "",
           "Growth with node count", *[f"- {line}" for line in scaling_lines(p)], "",
           "Sensitivity (expected lost h per job and ETTR at the headline's interval, closed form, one input at a "
           "time)",
           _text_table(SENSITIVITY_COLUMNS, sensitivity_rows(p)), ""]
    if p.model.derivation:
        out += ["Failure rate derivation", *[f"  {line}" for line in p.model.derivation], ""]
    out += ["Projection", _text_table(RESULT_COLUMNS, result_rows(p, full)), ""]
    out += ["Conclusions", *[f"- {line}" for line in conclusions(p)], ""]
    out += ["Assumptions", *[f"- {line}" for line in p.assumptions]]
    return "\n".join(out) + "\n"


def _md_cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header_row: tuple[str, ...] | list[str], rows: list[list[str]] | list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in header_row) + " |", "|" + "---|" * len(header_row)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(p: Projection, level: int = 2, full: bool = False) -> str:
    h = "#" * level
    out = [f"{h} Projection to scale", "", header(p), "", f"{h}# Headline", "",
           *[f"- {line}" for line in headline_lines(p)], "", f"{h}# Inputs", "",
           _md_table(INPUT_COLUMNS, input_rows(p)), "", f"{h}# Growth with node count", "",
           *[f"- {line}" for line in scaling_lines(p)], "", f"{h}# Sensitivity", "",
           _md_table(SENSITIVITY_COLUMNS, sensitivity_rows(p)), ""]
    if p.model.derivation:
        out += [f"{h}# Failure rate derivation", "", *[f"- {line}" for line in p.model.derivation], ""]
    out += [f"{h}# Projection", "", _md_table(RESULT_COLUMNS, result_rows(p, full)), ""]
    out += [f"{h}# Conclusions", "", *[f"- {line}" for line in conclusions(p)], ""]
    out += [f"{h}# Assumptions", "", *[f"- {line}" for line in p.assumptions], ""]
    return "\n".join(out)


def render_html(p: Projection) -> str:
    from html import escape

    def table(header_row: tuple[str, ...], rows: list[list[str]] | list[tuple[str, ...]]) -> str:
        head = "".join(f"<th>{escape(x)}</th>" for x in header_row)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def items(lines: list[str]) -> str:
        return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"

    parts = ["<h2 id=projection>Projection to scale</h2>", f"<p>{escape(header(p))}</p>",
             "<h3>Headline</h3>", items(headline_lines(p)),
             "<h3>Inputs</h3>", table(INPUT_COLUMNS, input_rows(p)),
             "<h3>Growth with node count</h3>", items(scaling_lines(p)),
             "<h3>Sensitivity</h3>", table(SENSITIVITY_COLUMNS, sensitivity_rows(p))]
    if p.model.derivation:
        parts += ["<h3>Failure rate derivation</h3>", items(list(p.model.derivation))]
    parts += ["<h3>Projection</h3>", table(RESULT_COLUMNS, result_rows(p)),
              "<h3>Conclusions</h3>", items(conclusions(p)), "<h3>Assumptions</h3>", items(p.assumptions)]
    return "\n".join(parts)
