"""The step table's bulk reads give what reading it row by row gives (the report's fast paths keep every figure).

``exactly_once`` reads an epoch's ids with ``rows_with_ids`` / ``ids_of`` (runs of rows as slices), and
``progress_by_node`` takes a node's points without pairs when they are strictly in time order; each is checked here
against the row-by-row reading on steps with odd ids (none, null, too large for an array, not numbers) and on
points with ties in time.
"""

from __future__ import annotations

import random
from itertools import chain
from typing import Any

from chaos.analysis.series import downsample, progress_by_node
from chaos.analysis.steps import StepTable


def _step(i: int, ids: Any = "absent", t: float | None = None, node: str = "n0") -> dict[str, Any]:
    e = {"t": float(i) if t is None else t, "event": "step_completed", "source": "workload", "step": i,
         "node": node, "pid": 1}
    if ids != "absent":
        e["sample_ids"] = ids
    return e


def _by_row(table: StepTable, rows: list[int]) -> tuple[list[int], list[Any]]:
    with_ids = [r for r in rows if table.sample_ids(r) is not None]
    return with_ids, list(chain.from_iterable(map(table.sample_ids, with_ids)))


def test_ids_of_equals_reading_row_by_row() -> None:
    rng = random.Random(3)
    plain = [_step(i, [rng.randrange(1000) for _ in range(rng.randrange(5))]) for i in range(200)]
    odd = [*plain[:50], _step(50, None), _step(51), _step(52, [2**70, 1]), _step(53, ["a", "b"]), *plain[54:]]
    for steps in (plain, odd):
        table = StepTable.of(steps)
        for rows in (list(range(len(steps))), sorted(rng.sample(range(len(steps)), 120)), [5, 4, 3, 9, 10, 11],
                     list(range(40, 60)), []):
            with_ids, ids = _by_row(table, rows)
            assert list(table.rows_with_ids(rows)) == with_ids
            assert list(table.ids_of(with_ids)) == ids


def test_progress_by_node_equals_sorting_the_points() -> None:
    rng = random.Random(5)
    steps = []
    for i in range(1, 400):
        t = 100.0 + i // 3 if i % 50 else 100.0 + (i - 1) // 3  # ties in time, some with a lower step after
        steps.append(_step(i if i % 97 else i - 5, t=t, node=f"n{i % 2}"))
    steps.append(_step(1, t=rng.uniform(90, 110), node="n2"))  # a node of one point
    steps += [_step(i, t=200.0 + i, node="n3") for i in range(300)]  # strictly later each time
    for max_points in (10, 50, 1000):
        got = progress_by_node(steps, 100.0, max_points=max_points)
        for node in {e["node"] for e in steps}:
            points = sorted((e["t"] - 100.0, e["step"]) for e in steps if e["node"] == node)
            assert got[node] == downsample(points, max_points)
