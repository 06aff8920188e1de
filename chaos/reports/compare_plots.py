"""``chaos compare``'s plots (matplotlib, headless): throughput over time, recovery split into its phases, and time
to result with what it cost, one colour per column, named by the columns' short names (chaos.compare.with_short).

Like the run report's plots they draw the analyses' downsampled series: nothing is measured here.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from chaos.reports.plots import fixed_margins, label_width_in, plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from chaos.analysis.run import RunAnalysis
    from chaos.compare import Column

# Bins of the throughput curve: about this many over a run, none shorter than MIN_BIN_S (a step's pace is noise
# at the scale of a few steps).
BINS, MIN_BIN_S = 60, 0.25
PHASE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"]


def _colours(n: int) -> list[str]:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def throughput_curve(analysis: RunAnalysis) -> list[tuple[float, float]]:
    """(seconds since the run started, steps/s) per bin: the job's highest step (over its nodes) at each bin's
    edges, differenced. A recovery shows as a gap at 0 steps/s; redone steps after it do not count twice."""
    points = sorted(p for series in analysis.progress.values() for p in series)
    if len(points) < 2:
        return []
    times, highest, top = [], [], float("-inf")
    for t, step in points:
        top = max(top, step)
        times.append(t)
        highest.append(top)
    start, end = times[0], times[-1]
    width = max((end - start) / BINS, MIN_BIN_S)
    edges = [start + i * width for i in range(int((end - start) / width) + 2)]
    at = [highest[max(bisect_right(times, e) - 1, 0)] for e in edges]
    return [(edges[i + 1], (at[i + 1] - at[i]) / width) for i in range(len(edges) - 1)]


def throughput(columns: list[Column], analyses: list[RunAnalysis]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.4), dpi=100)
    for c, a, colour in zip(columns, analyses, _colours(len(columns)), strict=True):
        curve = throughput_curve(a)
        if curve:
            ax.step([t for t, _ in curve], [r for _, r in curve], where="pre", color=colour, linewidth=1.4,
                    label=c.tag)
        for f in a.result["faults"]:
            if f.get("t_injected") is not None:
                ax.axvline(f["t_injected"] - a.t0, color=colour, linestyle="--", linewidth=1, alpha=0.8)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("steps/s")
    ax.set_title("throughput over time (each column's faults dashed in its colour)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fixed_margins(fig, left=0.45 + label_width_in([f"{t:g}" for t in ax.get_yticks()], 10), bottom=0.55)
    return fig


def recovery(columns: list[Column]) -> Figure | None:
    """The first disruptive fault's recovery per column, its phases stacked (the same phase, the same colour)."""
    shown = [c for c in columns if c.recovery_phases]
    if not shown:
        return None
    phases: list[str] = []
    for c in shown:
        phases += [name for name, _ in c.recovery_phases or [] if name not in phases]
    colour = {name: PHASE_COLOURS[i % len(PHASE_COLOURS)] for i, name in enumerate(phases)}
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.55 * len(shown) + 0.25 * ((len(phases) + 1) // 2)), dpi=100,
                           layout="constrained")
    labelled: set[str] = set()
    for y, c in enumerate(shown):
        left = 0.0
        for name, seconds in c.recovery_phases or []:
            if not seconds:
                continue
            ax.barh(y, seconds, left=left, color=colour[name], edgecolor="white",
                    label=None if name in labelled else name)
            labelled.add(name)
            left += seconds
    ax.set_yticks(range(len(shown)), [c.tag for c in shown])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the fault to the first step after it")
    ax.set_title("recovery from the first fault, by phase")
    fig.legend(fontsize=7, loc="outside lower center", ncol=2, frameon=False)  # below the axis, never on it
    ax.grid(alpha=0.3, axis="x")
    return fig


def result_and_cost(columns: list[Column]) -> Figure | None:
    """Time to result and node-seconds to it (nodes × that time) per column: what ranks the runs."""
    shown = [c for c in columns if c.time_to_result_s is not None]
    if len(shown) < 2:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 1.4 + 0.45 * len(shown)), dpi=100, sharey=True)
    colours = _colours(len(columns))
    by = {c.label: colours[i] for i, c in enumerate(columns)}
    ys = range(len(shown))
    left.barh(ys, [c.time_to_result_s or 0 for c in shown], color=[by[c.label] for c in shown])
    right.barh(ys, [(c.time_to_result_s or 0) * c.nodes for c in shown], color=[by[c.label] for c in shown])
    left.set_yticks(list(ys), [c.tag for c in shown])
    left.invert_yaxis()
    left.set_xlabel("time to result (s)")
    right.set_xlabel("node-seconds to the result")
    left.set_title("wall time to the last step", fontsize=10)
    right.set_title("cost: nodes × that time", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="x")
    fixed_margins(fig, left=0.25 + label_width_in([c.tag for c in shown], 10), bottom=0.55, top=0.35,
                  wspace=0.25)
    return fig


def figures(columns: list[Column], analyses: list[RunAnalysis]) -> dict[str, Figure]:
    """The comparison's plots by name, those that have something to show."""
    out = {"result": result_and_cost(columns), "throughput": throughput(columns, analyses),
           "recovery": recovery(columns)}
    return {name: fig for name, fig in out.items() if fig is not None}
