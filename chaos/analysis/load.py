"""Reading a history for analysis: one streaming parse into a step table and a short list of other events.

Almost every line of a long run is a ``step_completed`` (one per rank per step). Kept as parsed dicts, even with
shared keys and values, each cost ~1 KB (a 300k-event soak held 350 MB). Here the file is parsed a chunk at a
time (``chaos.history.iter_history``) and each step is appended to a :class:`~chaos.analysis.steps.StepTable`
(a column per field, typed arrays) and its dict dropped, so memory grows by what the metrics need of a step
(about a hundred bytes), not by the step's dict. The other events (checkpoints, faults, restarts: a few per
hundred steps) stay dicts, indexed by kind.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from itertools import compress, repeat
from operator import eq, itemgetter, not_
from pathlib import Path
from typing import Any, TypeVar

from chaos.analysis.steps import StepTable, time_order
from chaos.events import Ev, Source
from chaos.history import Event, LineReader, Unreadable, checked_chunks

T = TypeVar("T")


class History(list[Event]):
    """A sorted history: its events other than steps (a list, indexed by kind) and its steps (a :class:`StepTable`).

    Analysis asks for the faults, the loads ... many times; :func:`of_kind` answers from an index built once, and
    :func:`step_table` hands out the steps. Treat it as read-only: the index is not updated.
    """

    def __init__(self, events: list[Event], steps: StepTable | None = None, unreadable: Unreadable | None = None):
        super().__init__(events)
        self.steps = steps if steps is not None else StepTable()
        self.unreadable = unreadable or Unreadable()  # lines that were not usable events (reported, not fatal)
        self._by_kind: dict[Any, list[Event]] = {}
        self._memo: dict[str, Any] = {}
        for e in self:
            self._by_kind.setdefault(e.get("event"), []).append(e)

    @property
    def n_events(self) -> int:
        """Every event of the history, steps included."""
        return len(self) + len(self.steps)

    def of(self, kind: Ev) -> list[Event]:
        if kind == Ev.STEP_COMPLETED:
            raise TypeError("a History keeps its steps in a StepTable: use chaos.analysis.load.step_table")
        return self._by_kind.get(kind, [])

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """A derived structure several analyses need (the lineage ...), computed on first use."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]


def step_table(events: list[Event]) -> StepTable:
    """Every ``step_completed`` of the history, in order (built from the events when they are a plain list)."""
    if isinstance(events, History):
        return events.steps
    return StepTable.of(e for e in events if e.get("event") == Ev.STEP_COMPLETED)


def first_t(events: list[Event]) -> float:
    """Time of the history's first event (the plots' origin), 0.0 for an empty one."""
    times = [events[0].get("t", 0.0)] if events else []
    table = step_table(events) if isinstance(events, History) else None
    if table is not None and len(table):
        times.append(table.values("t", 0.0)[0])
    return min(times, default=0.0)


def memo(events: list[Event], key: str, compute: Callable[[], T]) -> T:
    """``compute()``, once per :class:`History` (plain event lists, as tests build them, compute every time)."""
    if isinstance(events, History):
        return events.memo(key, compute)
    return compute()


def of_kind(events: list[Event], kind: Ev) -> list[Event]:
    """The events of one kind, in order (indexed when ``events`` is a :class:`History`)."""
    if isinstance(events, History):
        return events.of(kind)
    return [e for e in events if e.get("event") == kind]


def of_kinds(events: list[Event], *kinds: Ev) -> list[Event]:
    """The events of several kinds in time order; events at the very same ``t`` come in the order of ``kinds``."""
    if isinstance(events, History):
        return sorted((e for kind in kinds for e in events.of(kind)), key=lambda e: e["t"])
    wanted = set(kinds)
    return [e for e in events if e.get("event") in wanted]


def load_events(path: Path | str) -> History:
    """The history sorted by time: steps in a step table, the other events as dicts (see the module docstring).

    Lines that are not usable events are counted and reported (``History.unreadable``), not fatal.
    """
    with HistoryLoader(path) as loader:
        return loader.history()


class HistoryLoader:
    """:func:`load_events` in parts: :meth:`read` parses what was written since the last call, :meth:`history`
    the rest and returns the same :class:`History` one :func:`load_events` at that moment would.

    Why: the report renderer reads the history while the job runs, in the cores' idle moments, so that its
    analysis after the last node exited parses only the last lines (~0.06 s of the end on the quickstart's 3,100
    events; issue 36). Opens the file at once (OSError as :func:`load_events` raises it)."""

    def __init__(self, path: Path | str):
        self._lines = LineReader(path)
        self._table = StepTable()
        self._others: list[Event] = []
        self._unreadable = Unreadable()

    def __enter__(self) -> HistoryLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._lines.close()

    def read(self, final: bool = False) -> None:
        # Thousands of new dicts per chunk, none in a reference cycle: the cyclic collector would rescan the heap
        # again and again for nothing, so it waits until the parse is done.
        collecting = gc.isenabled()
        gc.disable()
        try:
            step = Ev.STEP_COMPLETED
            for chunk in checked_chunks(self._lines.read(final), self._unreadable):
                # one look at each event's name (every checked event has one): steps to the table, the rest kept
                is_step = list(map(eq, map(itemgetter("event"), chunk), repeat(step)))
                self._table.extend(list(compress(chunk, is_step)))
                self._others.extend(compress(chunk, map(not_, is_step)))
        finally:
            if collecting:
                gc.enable()

    def history(self) -> History:
        """The whole history, sorted; the loader is spent after it (the file is closed)."""
        self.read(final=True)
        self.close()
        return _finished(self._others, self._table, self._unreadable)

    @property
    def steps_read(self) -> int:
        return len(self._table)

    def snapshot(self) -> History:
        """What was read so far, as a history, valid until the next :meth:`read` (it may share the loader's step
        table, which that read extends). The report renderer rehearses its drawing on it while the job runs."""
        return _finished(self._others, self._table, Unreadable(list(self._unreadable.lines), self._unreadable.count))


def _finished(others: list[Event], table: StepTable, unreadable: Unreadable) -> History:
    """The History of events read in file order: the others and the steps sorted by time (stable), and the rounds
    that only copy another's printed steps dropped."""
    others = sorted(others, key=lambda e: e.get("t", 0.0))
    table = _sorted_by_time(table)
    copies = copied_rounds(table)
    if copies:  # (histories written before the engine told copies apart)
        keys = zip(table.values("node"), table.values("pid"), strict=True)
        table = table.select([r for r, key in enumerate(keys) if key not in copies])
        others = [e for e in others if not (e.get("event") == Ev.PROCESS_STARTED and e.get("source") ==
                                            Source.PROGRESS and (e.get("node"), e.get("pid")) in copies)]
    return History(others, table, unreadable)


COPY_WINDOW_S = 3.0  # chaos.engine.progress.DUPLICATE_WINDOW_S


def copied_rounds(table: StepTable) -> set[tuple[Any, Any]]:
    """The inferred rounds (source ``progress``) that only repeat another round's printed steps as it printed them.

    A print-only job whose every rank prints the same progress line, read with a ``progress_regex`` without a
    ``rank`` group, made the engine (before it told such copies apart) start a round for each log that printed:
    the other node's copy of round ``node0:1`` became round ``node1:1``, counted as a restart, and judged as a
    round that "started from scratch". A round is such a copy when every step it printed was printed by an earlier
    round within COPY_WINDOW_S of it.
    """
    rows: dict[tuple[Any, Any], dict[int, float]] = {}
    for source, node, pid, step, t in zip(table.values("source"), table.values("node"), table.values("pid"),
                                          table.values("step"), table.values("t"), strict=True):
        if source == Source.PROGRESS and isinstance(step, int):
            rows.setdefault((node, pid), {}).setdefault(step, t)
    if len(rows) < 2:
        return set()
    first = {key: min(steps.values()) for key, steps in rows.items()}
    order = sorted(rows, key=first.__getitem__)
    copies: set[tuple[Any, Any]] = set()
    for i, key in enumerate(order):
        mine = rows[key]
        for other in order[:i]:
            if other in copies or other[0] == key[0]:
                continue  # the same node's log: an earlier round of its own
            theirs = rows[other]
            if all((t0 := theirs.get(s)) is not None and abs(t - t0) <= COPY_WINDOW_S for s, t in mine.items()):
                copies.add(key)
                break
    return copies


def _sorted_by_time(table: StepTable) -> StepTable:
    """The steps in time order (the file is in write order; writers on several processes race by microseconds).

    The same stable order as sorting all events by ``t``: steps keep their relative order.
    """
    order = time_order(table.values("t", 0.0))
    return table if isinstance(order, range) else table.select(order)
