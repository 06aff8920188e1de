"""The report's plots (matplotlib, headless): progress per node with fault windows, and loss against golden.

They draw the analysis' series, already downsampled (``chaos.analysis.series``): a long soak's plot costs what
its resolution needs, not one marker per event.
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from chaos.analysis.series import downsample
from chaos.analysis.verdict import Verdict
from chaos.registry import fault_colour
from chaos.reports.model import Report


def _fault_windows(report: Report, ax: Any, label: bool) -> None:
    """Each injected fault's window (shaded), injection (a line) and recovery (hatched) on one lane."""
    t0 = report.analysis.t0
    for f in report.result.faults:
        if f.t_injected is None:
            continue
        start = f.t_injected - t0
        colour = fault_colour(f.kind)
        if f.t_healed:
            ax.axvspan(start, f.t_healed - t0, color=colour, alpha=0.18)
        ax.axvline(start, color=colour, linewidth=1.5, label=f"{f.kind} {f.target}" if label else None)
        if f.recovery_s is not None:
            ax.axvspan(start, start + f.recovery_s, color=colour, alpha=0.08, hatch="//")
    for t in report.analysis.worker_starts[1:]:
        ax.axvline(t, color="black", linestyle=":", linewidth=1)


def fixed_margins(fig: Figure, left: float, bottom: float, top: float = 0.4, right: float = 0.15,
                  hspace: float = 0.0, wspace: float = 0.0) -> None:
    """Margins in inches, turned into the figure's fractions: what ``tight_layout`` would find for these plots,
    without measuring every text on a draw of its own (that measuring was ~40 % of rendering a report, and a
    report is rendered after every run). Inner gaps (``hspace``, ``wspace``) are inches too."""
    width, height = fig.get_size_inches()
    rows, cols = (fig.axes[0].get_subplotspec().get_gridspec().get_geometry() if fig.axes else (1, 1))
    axes_h = (height - top - bottom - hspace * (rows - 1)) / rows
    axes_w = (width - left - right - wspace * (cols - 1)) / cols
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        hspace=hspace / axes_h if rows > 1 else 0.2, wspace=wspace / axes_w if cols > 1 else 0.2)


def label_width_in(texts: list[str], size_pt: float) -> float:
    """About how wide the longest of these labels is (an average glyph is ~0.6 of its point size)."""
    return max((len(t) for t in texts), default=0) * size_pt * 0.6 / 72


# A lane per node: drawn on one axes, three nodes at the same step hide one another (only the last drawn shows).
LANE_HEIGHT_IN, MAX_LANES = 0.9, 16


def timeline(report: Report) -> Figure:
    """Progress per node, one lane (row) per node sharing the time axis, so that no node hides another; past
    MAX_LANES nodes the rest share the last lane (named in its label)."""
    nodes = list(report.analysis.progress.items()) or [("no steps", [])]
    lanes = [[n] for n in nodes[:MAX_LANES - 1]] + ([nodes[MAX_LANES - 1:]] if len(nodes) >= MAX_LANES else [])
    fig, axes = plt.subplots(len(lanes), 1, sharex=True, squeeze=False, dpi=100,
                             figsize=(9, 1.4 + LANE_HEIGHT_IN * len(lanes)))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (ax, lane) in enumerate(zip(axes[:, 0], lanes, strict=True)):
        for j, (_node, points) in enumerate(lane):
            ax.plot([x for x, _ in points], [y for _, y in points], ".", markersize=2, rasterized=True,
                    color=colours[(i + j) % len(colours)])
        _fault_windows(report, ax, label=i == 0)
        name = lane[0][0] if len(lane) == 1 else f"{lane[0][0]}…{lane[-1][0]}"
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
    top, bottom = axes[0, 0], axes[-1, 0]
    bottom.set_xlabel("seconds since the run started")
    top.set_title("global step per node, one lane each (fault windows shaded, worker restarts dotted)", fontsize=10)
    if top.get_legend_handles_labels()[1]:  # the faults (each lane is named by its node)
        top.legend(loc="upper left", fontsize=7, ncol=3)
    ticks = [f"{t:g}" for ax in axes[:, 0] for t in ax.get_yticks()]
    names = [lane[0][0] if len(lane) == 1 else f"{lane[0][0]}…{lane[-1][0]}" for lane in lanes]
    fixed_margins(fig, left=0.3 + label_width_in(names, 8) + label_width_in(ticks, 7), bottom=0.55,
                  hspace=0.12)
    return fig


def _golden_losses(report: Report) -> list[tuple[int, float]]:
    return sorted((int(k), v) for k, v in ((report.golden or {}).get("losses") or {}).items())


def loss_vs_golden(report: Report) -> Figure | None:
    """The run's loss over the golden's; when matches_golden compared them, the step it diverged at (marked) and a
    second panel of the difference per step (this run − golden), where a divergence is visible at any loss scale."""
    run = report.analysis.losses
    if not run:
        return None
    golden = _golden_losses(report)
    verdict = report.result.checkpoint.get("matches_golden") or Verdict(None, "")
    compared = bool(golden) and bool(verdict.get("steps_compared"))
    diverged_at = verdict.get("first_divergent_step")
    if compared:
        fig, (ax, dax) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.0), dpi=100,
                                      gridspec_kw={"height_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
        dax = None
    if golden:
        g = downsample(golden)
        ax.plot([s for s, _ in g], [v for _, v in g], color="#999999", linewidth=3, label="golden (no faults)")
    ax.plot([s for s, _ in run], [v for _, v in run], color="#d62728", linewidth=1,
            label="this run (surviving lineage)")
    ax.set_yscale("log")
    ax.set_ylabel("loss")
    ax.set_title("loss against the fault-free golden run")
    ax.grid(alpha=0.3)
    if dax is not None:
        by_step = dict(golden)
        diff = [(s, v - by_step[s]) for s, v in run if s in by_step]
        dax.plot([s for s, _ in diff], [d for _, d in diff], color="#1f77b4", linewidth=1)
        dax.axhline(0, color="#999999", linewidth=1)
        dax.set_ylabel("this run − golden")
        dax.set_xlabel("global step")
        dax.grid(alpha=0.3)
    else:
        ax.set_xlabel("global step")
    if diverged_at is not None:
        for a in (ax, dax):
            if a is not None:
                a.axvline(diverged_at, color="#8a1010", linestyle="--", linewidth=1.5,
                          label=f"diverges at step {diverged_at}" if a is ax else None)
    ax.legend(fontsize=8)
    # the log axis' labels (10⁻¹) are ~0.4 in wide; the difference panel's are plain numbers
    diff_ticks = [f"{t:g}" for t in dax.get_yticks()] if dax is not None else []
    fixed_margins(fig, left=0.45 + max(0.4, label_width_in(diff_ticks, 10)), bottom=0.55, hspace=0.12)
    return fig


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    # matplotlib's RDF metadata block names URIs (not requests); drop it to keep the report lean
    return re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def figures(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {"timeline": timeline(report)}
    loss = loss_vs_golden(report)
    if loss is not None:
        out["loss"] = loss
    return out
