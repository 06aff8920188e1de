"""Plot series from a history, downsampled so that a plot's cost is bounded by its resolution, not the run's length.

A soak of 300k events has ~100k points per node; an SVG draws every marker (25 s for the timeline alone), while a
900-pixel-wide figure shows at most a few thousand. Each series keeps, per bucket of consecutive points, the
lowest and the highest value in their order of time, so a restart's drop in the global step survives.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from itertools import islice, pairwise
from operator import lt
from typing import Any

from chaos.analysis.checkpoints import lineage, worker_steps
from chaos.analysis.load import of_kind, step_table
from chaos.events import Ev, Source
from chaos.history import Event

MAX_POINTS = 2000  # per series; about two per horizontal pixel of the report's figures


def downsample(points: Sequence[tuple[float, float]], max_points: int = MAX_POINTS) -> list[tuple[float, float]]:
    """At most ``max_points`` of ``points`` (ordered by x): each bucket's min and max of y, in x order."""
    if len(points) <= max_points:
        return list(points)
    buckets = max(1, max_points // 2)
    size = len(points) / buckets
    out: list[tuple[float, float]] = []
    for b in range(buckets):
        chunk = points[int(b * size):int((b + 1) * size)]
        if not chunk:
            continue
        lo = min(range(len(chunk)), key=lambda i: chunk[i][1])
        hi = max(range(len(chunk)), key=lambda i: chunk[i][1])
        out.extend(chunk[i] for i in sorted({lo, hi}))
    return out


Series = list[tuple[float, float]]


def progress_by_node(events: list[Event], t0: float, max_points: int = MAX_POINTS) -> dict[str, Series]:
    """(seconds since t0, global step) of every step completion, per node, downsampled."""
    table = step_table(events)
    times, step_no = table.values("t"), table.values("step")
    rows_of: dict[str, array[int]] = {}  # node → its rows (8 bytes a point until the bucket's pairs are made)
    for row, node in enumerate(table.values("node")):
        name = str(node)
        rows = rows_of.get(name)
        if rows is None:
            rows = rows_of[name] = array("q")
        rows.append(row)
    out: dict[str, Series] = {}
    for node, rows in sorted(rows_of.items()):
        xs = [times[r] - t0 for r in rows]
        if all(map(lt, xs, islice(xs, 1, None))):  # strictly later each time (the usual node): already sorted
            out[node] = _downsample_xy(xs, [step_no[r] for r in rows], max_points)
            continue
        points = _Points(rows, times, step_no, t0)  # ties or a clock step back: sorted as (x, step) pairs
        out[node] = downsample(points if points.in_order() else sorted(points), max_points)
    return out


def _downsample_xy(xs: list[float], ys: list[Any], max_points: int) -> Series:
    """:func:`downsample` of the points ``zip(xs, ys)``, without making a pair per point: only the kept ones."""
    if len(xs) <= max_points:
        return list(zip(xs, ys, strict=True))
    buckets = max(1, max_points // 2)
    size = len(xs) / buckets
    out: Series = []
    for b in range(buckets):
        first, end = int(b * size), int((b + 1) * size)
        if first >= end:
            continue
        lo = min(range(first, end), key=ys.__getitem__)  # the first lowest, as downsample picks
        hi = max(range(first, end), key=ys.__getitem__)
        out.extend((xs[i], ys[i]) for i in sorted({lo, hi}))
    return out


class _Points(Sequence[tuple[float, float]]):
    """(t - t0, step) of some rows, made when read: a long series is not held as tuples to be downsampled."""

    def __init__(self, rows: array[int], times: Sequence[float], step_no: Sequence[Any], t0: float):
        self.rows, self.times, self.step_no, self.t0 = rows, times, step_no, t0

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [(self.times[r] - self.t0, self.step_no[r]) for r in self.rows[i]]
        r = self.rows[i]
        return self.times[r] - self.t0, self.step_no[r]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return ((self.times[r] - self.t0, self.step_no[r]) for r in self.rows)

    def in_order(self) -> bool:
        """Whether the points are already as ``sorted`` would put them (the usual case: rows in time order)."""
        try:
            return all(a <= b for a, b in pairwise(self))
        except TypeError:
            return False


def worker_round_starts(events: list[Event], t0: float) -> list[float]:
    """Seconds since t0 at which a rank 0 worker started (the first is the job's start, the others restarts)."""
    return [e["t"] - t0 for e in of_kind(events, Ev.PROCESS_STARTED) if e.get("rank", 0) == 0
            and e.get("source") == Source.WORKLOAD]


def lineage_losses(events: list[Event], max_points: int = MAX_POINTS) -> list[tuple[float, float]]:
    """(step, loss) of rank 0 along the surviving lineage, downsampled."""
    chain, _ = lineage(events)
    table = worker_steps(events)
    step_no, losses, ranks = table.values("step"), table.values("loss"), table.values("rank", 0)
    run = sorted((step_no[r], losses[r]) for seg in chain for r in seg["rows"]
                 if losses[r] is not None and ranks[r] == 0)
    return downsample(run, max_points)
