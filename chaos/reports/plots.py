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
from chaos.registry import fault_colour
from chaos.reports.model import Report


def timeline(report: Report) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    t0 = report.analysis.t0
    for node, points in report.analysis.progress.items():
        ax.plot([x for x, _ in points], [y for _, y in points], ".", markersize=2, label=node)
    for f in [f for f in report.result["faults"] if f.get("t_injected") is not None]:
        start = f["t_injected"] - t0
        colour = fault_colour(f["kind"])
        if f.get("t_healed"):
            ax.axvspan(start, f["t_healed"] - t0, color=colour, alpha=0.18)
        ax.axvline(start, color=colour, linewidth=1.5, label=f"{f['kind']} {f['target']}")
        if f.get("recovery_s") is not None:
            ax.axvspan(start, start + f["recovery_s"], color=colour, alpha=0.08, hatch="//")
    for t in report.analysis.worker_starts[1:]:
        ax.axvline(t, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("global step")
    ax.set_title("progress per node (fault windows shaded, worker restarts dotted)")
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def loss_vs_golden(report: Report) -> Figure | None:
    run = report.analysis.losses
    if not run:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    if report.golden and report.golden.get("losses"):
        g = downsample(sorted((int(k), v) for k, v in report.golden["losses"].items()))
        ax.plot([s for s, _ in g], [v for _, v in g], color="#999999", linewidth=3, label="golden (no faults)")
    ax.plot([s for s, _ in run], [v for _, v in run], color="#d62728", linewidth=1,
            label="this run (surviving lineage)")
    ax.set_yscale("log")
    ax.set_xlabel("global step")
    ax.set_ylabel("loss")
    ax.set_title("loss against the fault-free golden run")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
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
