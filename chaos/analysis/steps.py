"""The step table: every ``step_completed`` of a history as one column per field, not one dict per event.

Almost every line of a long run is a step (one per rank per step), and the metrics need a few numbers of each:
its time, step, loss, timing, rank, which process did it, the sample ids. Kept as dicts, a step cost ~1 KB (a
300k-event soak held 350 MB); here it costs what its values cost in typed arrays (8 bytes a number, a small code
for the process and incarnation, 4 bytes a sample id), so a report's memory grows with what the metrics need.

A column stays exact: it holds a typed ``array`` only while every value has that column's exact type (a float
column takes ``float``, not ``int`` or ``bool``), and turns into a plain list the first time a value does not fit
(an ``int`` loss, a ``None``, an absent field), so ``values()`` returns what ``dict.get`` returned on the event.
Fields of steps the metrics never read are not kept.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, chain, islice
from operator import itemgetter, le
from typing import Any

from chaos.history import Event


class _Missing:
    """A field absent from a step (``dict.get`` would return its default)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_LIST: Any = object()  # a row that is not odd in _SampleIds: its ids are a slice of the flat array

# Typed columns: field → (array typecode, the one Python type it holds). Integers start at 4 bytes and widen to 8
# when a value needs it; floats stay 8-byte doubles (a narrower float would change the figures).
_NUMBERS: dict[str, tuple[str, type]] = {
    "t": ("d", float), "step": ("i", int), "loss": ("d", float), "duration_s": ("d", float),
    "comm_s": ("d", float), "cpu_s": ("d", float), "cpu_wait_s": ("d", float), "samples": ("i", int),
    "rank": ("i", int), "world_size": ("i", int), "epoch": ("i", int), "dataset_size": ("i", int)}
# Widening order of integer arrays.
_WIDER = {"B": "H", "H": "i", "i": "q"}
# Coded columns: values that repeat across steps (a process, its incarnation), stored as indices into a table.
_CODED = ("source", "node", "pid", "incarnation")
FIELDS = (*_NUMBERS, *_CODED, "sample_ids")


class _Column:
    """One field of every step: a typed array while the values allow, else a list (``MISSING`` where absent)."""

    __slots__ = ("data", "kind")

    def __init__(self, typecode: str, kind: type):
        self.data: array[Any] | list[Any] = array(typecode)
        self.kind: type | None = kind

    def append(self, value: Any) -> None:
        if self.kind is not None:
            if type(value) is self.kind:
                try:
                    self.data.append(value)  # type: ignore[arg-type]
                    return
                except OverflowError:
                    if self.data.typecode in _WIDER:  # type: ignore[union-attr]
                        self.data = array(_WIDER[self.data.typecode], self.data)  # type: ignore[union-attr]
                        self.append(value)
                        return
            self.data, self.kind = list(self.data), None
        self.data.append(value)  # type: ignore[arg-type]

    def extend(self, values: list[Any]) -> None:
        """Many values at once: one C-level ``extend`` when all have the column's type (the usual case), and when
        the column already is a list (a field some steps lack: no value by value ``append`` for every chunk)."""
        if self.kind is None:
            self.data.extend(values)  # type: ignore[arg-type]
            return
        if set(map(type, values)) <= {self.kind}:
            before = len(self.data)
            try:
                self.data.extend(values)  # type: ignore[arg-type]
                return
            except OverflowError:  # an int that needs a wider array: undo, then take the values one by one
                del self.data[before:]
        for v in values:
            self.append(v)


class _Coded:
    """A field whose values repeat: one small integer per step, each distinct value stored once."""

    __slots__ = ("_index", "codes", "plain", "values")

    def __init__(self) -> None:
        self.codes = array("B")  # widened as distinct values grow (1 byte a step for up to 256 of them)
        self.values: list[Any] = []
        self._index: dict[tuple[type, Any], int] = {}
        self.plain: list[Any] | None = None  # once a value cannot be a dict key (a list ...): values kept as they are

    def append(self, value: Any) -> None:
        if self.plain is not None:
            self.plain.append(value)
            return
        try:
            code = self._index.get((type(value), value))
            if code is None:
                code = self._index[(type(value), value)] = len(self.values)
                self.values.append(value)
        except TypeError:
            self.plain = [self.values[c] for c in self.codes] + [value]
            self.codes = array("B")
            return
        self._widen(code)
        self.codes.append(code)

    def _widen(self, code: int) -> None:
        while code >= 1 << (8 * self.codes.itemsize - (self.codes.typecode == "i")) and self.codes.typecode in _WIDER:
            self.codes = array(_WIDER[self.codes.typecode], self.codes)

    def extend(self, values: list[Any]) -> None:
        """Many values at once. Strings and ints never equal one another, so they can be looked up by value alone
        (1, 1.0 and True are equal dict keys: any other type goes through ``append``, keyed by type too)."""
        if self.plain is None and set(map(type, values)) <= {str, int}:
            index = self._index
            for v in set(values):
                if (type(v), v) not in index:
                    index[(type(v), v)] = len(self.values)
                    self.values.append(v)
            by_value = {v: code for (_, v), code in index.items() if type(v) in (str, int)}
            self._widen(len(self.values))
            self.codes.extend([by_value[v] for v in values])
            return
        for v in values:
            self.append(v)

    def get(self, default: Any = MISSING) -> list[Any]:
        """Each step's value, ``default`` where absent."""
        if self.plain is not None:
            return [default if v is MISSING else v for v in self.plain]
        values = [default if v is MISSING else v for v in self.values]
        return list(map(values.__getitem__, self.codes))

    def rows_where(self, keep: Callable[[Any], bool]) -> Sequence[int]:
        """The rows whose value passes ``keep`` (judged once per distinct value); ``range`` when all do."""
        if self.plain is not None:
            return [i for i, v in enumerate(self.plain) if keep(None if v is MISSING else v)]
        ok = [keep(None if v is MISSING else v) for v in self.values]
        if all(ok):
            return range(len(self.codes))
        return [i for i, c in enumerate(self.codes) if ok[c]]


class _SampleIds:
    """Every step's sample ids in one flat array (2 bytes an id where they fit), with each step's offset."""

    __slots__ = ("flat", "odd", "offsets")

    def __init__(self) -> None:
        self.flat: array[int] = array("H")  # 2 bytes an id while they fit, widened as needed
        self.offsets = array("q", [0])  # 8 bytes a step: the flat array may pass 2**31 ids
        self.odd: dict[int, Any] = {}  # step row → its value, where that is not a list of machine integers

    def append(self, value: Any) -> None:
        row = len(self.offsets) - 1
        if isinstance(value, list):
            before = len(self.flat)
            try:
                self.flat.extend(value)
            except (OverflowError, TypeError) as exc:
                del self.flat[before:]  # what was appended before the value that did not fit
                if isinstance(exc, OverflowError) and self.flat.typecode in _WIDER:
                    self.flat = array(_WIDER[self.flat.typecode], self.flat)
                    self.append(value)
                    return
                self.odd[row] = tuple(value)
        else:
            self.odd[row] = value
        self.offsets.append(len(self.flat))

    def extend(self, values: list[Any]) -> None:
        """Many steps' ids at once: one ``extend`` when each is a list of ints that fit (the usual case)."""
        if set(map(type, values)) == {list}:
            lengths = list(map(len, values))
            before = len(self.flat)
            try:
                self.flat.extend(chain.from_iterable(values))
            except (OverflowError, TypeError):
                del self.flat[before:]
            else:
                end = self.offsets[-1]
                self.offsets.extend(accumulate(lengths, initial=end))
                del self.offsets[-len(lengths) - 1]  # the initial value, already there
                return
        for v in values:
            self.append(v)

    def get(self, row: int) -> Any:
        """The step's ids (an array slice or a tuple), ``None`` if it had none, ``MISSING`` if it had no field."""
        if row in self.odd:
            return self.odd[row]
        return self.flat[self.offsets[row]:self.offsets[row + 1]]

    def joined(self, rows: Iterable[int]) -> array[int] | None:
        """The ids of ``rows`` one after the other, or ``None`` when one of them is odd (the caller reads them row
        by row). Consecutive rows are one slice of the flat array: a lineage's rows mostly are, so an epoch of a
        few hundred steps costs a few slices, not a slice per step."""
        odd, offsets, flat = self.odd, self.offsets, self.flat
        out = array(flat.typecode)
        start = end = -1  # the run of consecutive rows not yet copied: [start, end)
        for r in rows:
            if r in odd:
                return None
            if r != end:
                if end > start:
                    out.extend(flat[offsets[start]:offsets[end]])
                start = r
            end = r + 1
        if end > start:
            out.extend(flat[offsets[start]:offsets[end]])
        return out


class StepTable:
    """The steps of a history in their order, one column per field (see the module docstring)."""

    def __init__(self) -> None:
        self.n = 0
        self._numbers = {name: _Column(code, kind) for name, (code, kind) in _NUMBERS.items()}
        self._coded = {name: _Coded() for name in _CODED}
        self._ids = _SampleIds()

    @classmethod
    def of(cls, steps: Iterable[Event]) -> StepTable:
        table = cls()
        table.extend(list(steps))
        return table

    def append(self, e: Event) -> None:
        self.extend([e])

    def extend(self, steps: list[Event]) -> None:
        """Append steps (a parsed chunk of them: each field is appended for all of them at once)."""
        if not steps:
            return
        for name, column in self._numbers.items():
            column.extend(_field(steps, name))
        for name, coded in self._coded.items():
            coded.extend(_field(steps, name))
        self._ids.extend(_field(steps, "sample_ids"))
        self.n += len(steps)

    def __len__(self) -> int:
        return self.n

    def values(self, name: str, default: Any = None) -> Sequence[Any]:
        """Each step's value of a field, ``default`` where it was absent (as ``dict.get(name, default)``)."""
        if name in self._coded:
            return self._coded[name].get(default)
        data = self._numbers[name].data
        if isinstance(data, array):
            return data
        return [default if v is MISSING else v for v in data]

    def has(self, name: str) -> Sequence[bool]:
        """Whether each step had the field (``name in event``)."""
        data = self._numbers[name].data if name in self._numbers else self._coded[name].get()
        if isinstance(data, array):
            return [True] * self.n
        return [v is not MISSING for v in data]

    def rows_where(self, name: str, keep: Callable[[Any], bool]) -> Sequence[int]:
        """The rows whose value of a field (``None`` where absent) passes ``keep``; ``range(n)`` when all do
        (cheap for a coded field: judged once per distinct value)."""
        if name in self._coded:
            return self._coded[name].rows_where(keep)
        return [i for i, v in enumerate(self.values(name)) if keep(v)]

    def typed(self, name: str) -> type | None:
        """The one type every value of a number field has (``None``: mixed, or absent somewhere)."""
        return self._numbers[name].kind

    def sample_ids(self, row: int) -> Any:
        """A step's sample ids (``None`` where absent or null)."""
        ids = self._ids.get(row)
        return None if ids is MISSING else ids

    def rows_with_ids(self, rows: Iterable[int]) -> Iterable[int]:
        """The rows whose step has sample ids (``sample_ids(row) is not None``): ``rows`` itself when every step of
        the table has a list of them (no row to look at one by one)."""
        odd = self._ids.odd
        if not odd:
            return rows
        return [r for r in rows if (ids := odd.get(r, _LIST)) is not None and ids is not MISSING]

    def ids_of(self, rows: Sequence[int]) -> Sequence[Any]:
        """The sample ids of ``rows`` one after the other (every row must have ids: see :meth:`rows_with_ids`)."""
        joined = self._ids.joined(rows)
        if joined is not None:
            return joined
        return list(chain.from_iterable(map(self.sample_ids, rows)))

    def select(self, rows: Sequence[int]) -> StepTable:
        """A table of some of the rows, in the given order (the table itself when that is all of them in order)."""
        if isinstance(rows, range) and rows == range(self.n):
            return self
        if len(rows) == self.n and all(i == r for i, r in enumerate(rows)):
            return self
        out = StepTable()
        for name, column in self._numbers.items():
            data = column.data
            target = out._numbers[name]
            if isinstance(data, array):
                target.data = array(data.typecode, (data[i] for i in rows))
            else:
                target.data, target.kind = [data[i] for i in rows], None
        for name, coded in self._coded.items():
            values = coded.get() if coded.plain is not None else None
            target_coded = out._coded[name]
            if values is not None:
                target_coded.plain = [values[i] for i in rows]
            else:
                target_coded.values = list(coded.values)
                target_coded.codes = array(coded.codes.typecode, (coded.codes[i] for i in rows))
        for i in rows:
            ids = self._ids.get(i)
            out._ids.append(list(ids) if isinstance(ids, array) else ids)
        out.n = len(rows)
        return out


def _field(steps: list[Event], name: str) -> list[Any]:
    """One field of each step, ``MISSING`` where absent (``itemgetter`` first: C speed when every step has it)."""
    try:
        return list(map(itemgetter(name), steps))
    except KeyError:
        return [e.get(name, MISSING) for e in steps]


def time_order(t: Sequence[float]) -> Sequence[int]:
    """Row indices in time order (a stable sort); a ``range`` when the rows already are (a loaded history's are)."""
    if all(map(le, t, islice(t, 1, None))):  # each t no earlier than the one before, compared in C
        return range(len(t))
    return sorted(range(len(t)), key=t.__getitem__)
