"""The report's plots (matplotlib, headless): progress per node with fault windows, and loss against golden."""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from chaos.registry import fault_colour
from chaos.reports.model import Report


def timeline(report: Report) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    by_node: dict[str, tuple[list[float], list[int]]] = {}
    for e in report.events:
        if e.get("event") == "step_completed":
            xs, ys = by_node.setdefault(str(e.get("node")), ([], []))
            xs.append(e["t"] - report.t0)
            ys.append(e["step"])
    for node, (xs, ys) in sorted(by_node.items()):
        ax.plot(xs, ys, ".", markersize=2, label=node)
    for f in report.result["faults"]:
        start = f["t_injected"] - report.t0
        colour = fault_colour(f["kind"])
        if f.get("t_healed"):
            ax.axvspan(start, f["t_healed"] - report.t0, color=colour, alpha=0.18)
        ax.axvline(start, color=colour, linewidth=1.5, label=f"{f['kind']} {f['target']}")
        if f.get("recovery_s") is not None:
            ax.axvspan(start, start + f["recovery_s"], color=colour, alpha=0.08, hatch="//")
    restarts = [e["t"] - report.t0 for e in report.events
                if e.get("event") == "process_started" and e.get("rank", 0) == 0 and e.get("source") == "workload"]
    for t in restarts[1:]:
        ax.axvline(t, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("global step")
    ax.set_title("progress per node (fault windows shaded, worker restarts dotted)")
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def loss_vs_golden(report: Report) -> Figure | None:
    from chaos.analysis.checkpoints import lineage

    chain, _ = lineage(report.events)
    run = sorted((e["step"], e["loss"]) for seg in chain for e in seg["events"]
                 if e.get("loss") is not None and e.get("rank", 0) == 0)
    if not run:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    if report.golden and report.golden.get("losses"):
        g = sorted((int(k), v) for k, v in report.golden["losses"].items())
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
