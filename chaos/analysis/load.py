"""Reading a history for analysis: one streaming parse into compact records.

Almost every line of a long run is a ``step_completed`` (one per rank per step). Parsed line by line, each cost
~3.5 KB (a dict with its own copy of every key string, its own copies of repeated values, a list of boxed
sample ids), so a 300k-event soak held 1 GB. Here key strings are shared (the chunked parse of
``chaos.history.iter_history``), repeated values (node, source, incarnation, pid) are shared, and sample ids are
packed in an ``array``: ~0.8 KB per step. Steps stay plain dicts, because every metric reads events with
``dict.get`` many times: a dict-like class with slots, half the size, made analysis 5x slower.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from chaos.events import Ev
from chaos.history import Event, Unreadable, iter_checked

T = TypeVar("T")

# Fields of a step whose values repeat across lines (node names, sources, incarnation ids, pids).
_SHARED = ("source", "event", "node", "pid", "incarnation")


class _Compactor:
    """Shrinks parsed step events in place: repeated values shared, sample ids packed."""

    def __init__(self) -> None:
        self._shared: dict[Any, Any] = {}

    def step(self, e: Event) -> Event:
        share = self._shared.setdefault
        for k in _SHARED:
            v = e.get(k)
            if v is not None:
                e[k] = share(v, v)
        ids = e.get("sample_ids")
        if isinstance(ids, list):
            e["sample_ids"] = _pack(ids)
        return e


class History(list[Event]):
    """A sorted history that hands out its events of one kind without a pass over all of them each time.

    Analysis asks for the steps, the faults, the loads ... many times; :func:`of_kind` answers from an index
    built once. Treat it as read-only: the index is not updated.
    """

    def __init__(self, events: list[Event], unreadable: Unreadable | None = None):
        super().__init__(events)
        self.unreadable = unreadable or Unreadable()  # lines that were not usable events (reported, not fatal)
        self._by_kind: dict[Any, list[Event]] = {}
        self._memo: dict[str, Any] = {}
        for e in self:
            self._by_kind.setdefault(e.get("event"), []).append(e)

    def of(self, kind: Ev) -> list[Event]:
        return self._by_kind.get(kind, [])

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """A derived structure several analyses need (the lineage ...), computed on first use."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]


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


def _pack(ids: list[Any]) -> Any:
    for typecode in ("i", "q"):  # 4 bytes an id when they fit, else 8
        try:
            return array(typecode, ids)
        except OverflowError:
            continue
        except TypeError:
            break
    return tuple(ids)  # ids that are not machine integers: kept as they are


def load_events(path: Path | str) -> History:
    """The history sorted by time, with step events compact (see the module docstring)."""
    compactor = _Compactor()
    unreadable = Unreadable()  # lines that are not usable events: counted and reported, not fatal
    # Hundreds of thousands of new dicts, none in a reference cycle: the cyclic collector would rescan the growing
    # heap again and again for nothing (a third of the load time), so it waits until they are all built.
    collecting = gc.isenabled()
    gc.disable()
    try:
        events = [compactor.step(e) if e.get("event") == Ev.STEP_COMPLETED else e
                  for e in iter_checked(path, unreadable)]
        events.sort(key=lambda e: e.get("t", 0.0))
        return History(events, unreadable)
    finally:
        if collecting:
            gc.enable()
