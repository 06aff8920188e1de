"""The history: ``events.jsonl``, one ordered log of everything that happened in a run.

The engine writes it: its own events and, through :class:`chaos.channel.ChannelServer`, every workload and agent
event in the order it received them, all through :class:`HistoryWriter` (one ``write`` per line on an ``O_APPEND``
descriptor), so the file is complete up to the moment anything crashed. The storage layer (on the engine's host)
and a probe given a file instead of a channel append to the same file the same way. Analysis reads it back sorted
by ``t`` (the engine's clock: the channel corrects a sender whose clock measurably differs); nothing else is
needed to recompute a run's metrics and verdicts.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Event: one line of the history, of any event (declared in chaos.events; readers import it from here or there)
from chaos.events import FIELDS, STORAGE_FIELDS, Event, Source, WorkloadLine
from chaos.paths import open_regular

# A history of 300k lines is parsed ~3x faster by orjson (same values; a line it refuses is re-read by json), and an
# event ~10x faster written (0.7 vs 8 us here; the engine writes every event the channel brings, ~3,100 per
# quickstart run: issue 36). Its output is json's but compact, with non-finite floats as null (the probe writes them
# so); what it does not write as json.dumps would (dataclasses, datetimes, ints beyond 64 bits, keys that are no
# strings) is written by json.dumps as before.
# orjson is the engine's dependency, not a compute host's: the storage layer there (chaos.storage.record) imports this
# module with the standard library only, and then parses and writes with json.
try:
    import orjson
except ImportError:  # pragma: no cover - a compute host's storage layer (tests/test_storage_hostlayer.py)
    orjson = None  # type: ignore[assignment]
_fast_loads: Callable[[bytes], Any] = orjson.loads if orjson is not None else json.loads
_DUMPS_AS_JSON = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME if orjson is not None else 0


def loads_line(line: bytes) -> Any:
    """One JSON value: orjson's parse, else json's (what orjson refuses and json takes: NaN, a lone surrogate);
    ValueError or RecursionError for what neither takes."""
    try:
        return _fast_loads(line)
    except ValueError:  # orjson.JSONDecodeError is one
        return json.loads(line)


def dumps_line(record: Any) -> bytes:
    """One history line (its newline included)."""
    try:
        if orjson is not None:
            return orjson.dumps(record, option=_DUMPS_AS_JSON) + b"\n"
    except TypeError:  # orjson.JSONEncodeError is one: a value orjson does not write as json does
        pass
    return (json.dumps(record, default=str) + "\n").encode()


class HistoryWriter:
    """Appends engine events; thread-safe, flushed as written."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, event: str, source: str = Source.ENGINE, **fields: Any) -> Event:
        """Append one event (a :class:`chaos.events.Ev`; its fields are declared there)."""
        record: Event = {"t": time.time(), "source": source, "event": event, **fields}
        self.write_record(record)
        return record

    def write_record(self, record: Event) -> None:
        """Append one finished event (one received over the history channel): the same lock as the engine's
        own, so the file's order is the order the engine wrote in."""
        line = dumps_line(record)
        with self._lock:
            if self._fd >= 0:
                os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass
class FileTail:
    """Reads the lines appended since the last call; a partially written last line waits for the next call.

    ``keep_open``: the file is opened once (once it exists) and read on from there, not reopened by its name at
    every call (~30 us each, at every engine tick). Only for a file on this host that is never replaced: the
    history the engine writes. A node's log may sit on a shared filesystem written from other hosts, where only a
    fresh open is sure to see what they appended (NFS's close-to-open consistency)."""

    path: Path
    keep_open: bool = False
    _offset: int = 0
    _partial: bytes = field(default=b"")
    _lines: int = 0  # complete lines read so far, blank ones included (a line's number in the file)
    _fd: int = -1

    def read_lines(self) -> list[str]:
        return [line for _, line in self.read_numbered_lines()]

    def read_numbered_lines(self) -> list[tuple[int, str]]:
        """The new non-blank lines with their 1-based numbers in the file (for messages that name a line)."""
        return [(number, line.decode(errors="replace")) for number, line in self._read_numbered()]

    def _read_numbered(self) -> list[tuple[int, bytes]]:
        chunk = self._read_kept() if self.keep_open else self._read_reopened()
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        first, self._lines = self._lines + 1, self._lines + len(lines)
        return [(first + i, line) for i, line in enumerate(lines) if line.strip()]

    def _read_reopened(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def _read_kept(self) -> bytes:
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return b""
            os.lseek(self._fd, self._offset, os.SEEK_SET)
        parts = []
        while block := os.read(self._fd, 1 << 20):
            parts.append(block)
        return b"".join(parts)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read_new(self) -> Iterator[Event]:
        """The new lines parsed as events (for the history file)."""
        for _, line in self._read_numbered():
            try:
                yield _fast_loads(line)
            except (ValueError, RecursionError):  # what orjson refuses: json's parse, of read_lines's text
                try:
                    yield json.loads(line.decode(errors="replace"))
                except (ValueError, RecursionError):
                    continue


# Bytes of lines parsed per json.loads call. Decoding a chunk as one JSON array is faster than line by line, and
# the decoder shares key strings within a call, so thousands of events hold one copy of each key. (orjson, line
# by line, was measured no faster on a whole report and held 15% more memory: it does not share keys.)
_CHUNK_BYTES = 1 << 20


def iter_history(path: Path | str) -> Iterator[Event]:
    """Every event in file order, parsed in chunks; memory stays bounded by a chunk, not the file.

    A line that is not valid JSON (a torn last line: its writer was killed mid-write) is skipped, not fatal.
    """
    for chunk in iter_chunks(path):
        yield from chunk


# A history line is one event: a few hundred bytes, a few KB for run_started with its plan. A line longer than this
# is no event; it is skipped unread (counted unreadable), so a damaged or hostile file (a run directory may be an
# unpacked CI artifact) costs bounded memory whatever it holds.
MAX_LINE_BYTES = 16 << 20


def _numbered_lines(path: Path | str) -> Iterator[list[tuple[int, bytes | None]]]:
    """The file's non-blank lines with their 1-based numbers, a list per ~megabyte read; ``None`` for a line over
    MAX_LINE_BYTES (its bytes are dropped as they are read). Only a regular file is read: a device or a pipe
    (``events.jsonl`` a link to /dev/zero, a FIFO) would never end."""
    with LineReader(path) as reader:
        yield from reader.read(final=True)


class LineReader:
    """:func:`_numbered_lines`, resumable: each :meth:`read` goes on where the last one stopped, so a reader of a
    history that is still being written (the report renderer, during the job) parses every line once.

    A read that is not ``final`` keeps an unended last line for the next read (its writer may be mid-line); the
    final read takes it as a line, as a whole-file read does. Read in any number of parts, the lines and their
    numbers are those of one read of the whole file. The descriptor stays open: the engine appends to the file it
    created and never replaces it."""

    def __init__(self, path: Path | str):
        self._fd = open_regular(path, "; a history is a file")
        self._number, self._carry, self._too_long = 0, b"", False
        self._done = False

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, final: bool = False) -> Iterator[list[tuple[int, bytes | None]]]:
        """The lines written since the last read (all of them, unended last line included, when ``final``)."""
        if self._done:
            raise ValueError("this history was read to its end already")
        while block := os.read(self._fd, _CHUNK_BYTES):
            *ended, rest = block.split(b"\n")
            out: list[tuple[int, bytes | None]] = []
            if ended:
                if self._too_long:  # the first ended piece is the tail of a line already too long
                    self._number += 1
                    out.append((self._number, None))
                    ended = ended[1:]
                    self._too_long = False
                else:
                    ended[0] = self._carry + ended[0]
                self._carry = b""
                for line in ended:
                    self._number += 1
                    if len(line) > MAX_LINE_BYTES:
                        out.append((self._number, None))
                    elif line.strip():
                        out.append((self._number, line))
            if not self._too_long:
                self._carry += rest
                if len(self._carry) > MAX_LINE_BYTES:
                    self._carry, self._too_long = b"", True
            if out:
                yield out
        if not final:
            return
        self._done = True
        if self._too_long:
            yield [(self._number + 1, None)]
        elif self._carry.strip():  # a last line without its newline (a torn write, or a writer that never ends lines)
            yield [(self._number + 1, self._carry)]


def iter_chunks(path: Path | str) -> Iterator[list[Event]]:
    """The events in file order, a list per megabyte of lines (for readers that handle events in bulk)."""
    for numbered in _numbered_lines(path):
        lines = [line for _, line in numbered if line is not None]
        if not lines:
            continue
        try:
            chunk: list[Any] = _fast_loads(b"[" + b",".join(lines) + b"]")
        except (json.JSONDecodeError, RecursionError):  # a torn line in this chunk: line by line, skip the broken
            chunk = [e for e in map(_parse_line, lines) if e is not None]
        yield [e for e in chunk if isinstance(e, dict)]


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, nested too deep
        return None


def read_history(path: Path | str) -> list[Event]:
    """All events sorted by time (the file is in write order; writers on several processes race by microseconds)."""
    events = list(iter_history(path))
    events.sort(key=lambda e: e.get("t", 0.0))
    return events


@dataclass
class Unreadable:
    """The lines of a history that could not be read, for reports to say so instead of silently skipping them."""

    lines: list[int] = field(default_factory=list)  # 1-based line numbers, the first KEEP of them
    count: int = 0
    KEEP = 100

    def add(self, line: int) -> None:
        self.count += 1
        if len(self.lines) < self.KEEP:
            self.lines.append(line)


def _simple_types(hint: Any) -> tuple[type, ...] | None:
    """The Python types a JSON value of a declared field may have, or None when not checked here."""
    import types
    import typing

    simple = {float: (int, float), int: (int,), str: (str,), bool: (bool,), type(None): (type(None),),
              list: (list,), dict: (dict,)}
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    out: tuple[type, ...] = ()
    for a in args:
        a = typing.get_origin(a) or a
        if a not in simple:
            return None
        out += simple[a]
    return out


@functools.cache
def _field_checks() -> dict[str, list[tuple[str, bool, tuple[type, ...]]]]:
    """Per event name: (declared field, must be present, accepted types), from the declarations in chaos.events.

    Workload events come from user code and analysis indexes their fields (``step``, ``path``), so theirs must
    all be present; an engine event missing a field (an older engine) is still used, its present fields typed."""
    import typing


    workload_keys = WorkloadLine.__required_keys__  # type: ignore[attr-defined]
    checks: dict[str, list[tuple[str, bool, tuple[type, ...]]]] = {}
    for prefix, declarations in (("", FIELDS), (STORAGE_PREFIX, STORAGE_FIELDS)):
        for ev, declared in declarations.items():
            hints = typing.get_type_hints(declared)
            required = declared.__required_keys__  # type: ignore[attr-defined]
            present = bool(prefix) or workload_keys <= required  # the storage layer writes every declared field
            # Optional fields are typed too when present: analysis does arithmetic on `samples` and `duration_s`
            # and hashes `incarnation`, so a string or a list there was an exception, not a skipped line.
            checks[prefix + str(ev)] = [(name, present and name in required,
                                         _simple_types(hints.get(name)) or (object,))
                                        for name in sorted(hints)
                                        if name not in ("t", "event")]  # readable() checks these two first
    return checks


# Checks of the storage layer's own declarations (chaos.events.STORAGE_FIELDS) are keyed "storage:<event>".
STORAGE_PREFIX = f"{Source.STORAGE}:"


def readable(e: Any, checks: dict[str, list[tuple[str, bool, tuple[type, ...]]]]) -> bool:
    """Whether a parsed line is an event analysis can use: a mapping with a finite numeric ``t``, an ``event``
    name, and, for a known event, its declared fields of their declared types (see :func:`_field_checks`).
    An optional field that is null is removed from the event (absent is what analysis handles)."""
    if not isinstance(e, dict):
        return False
    t, name = e.get("t"), e.get("event")
    if t.__class__ is not float and (t.__class__ is not int):  # bool is neither
        return False
    # A time is seconds since the epoch (or since a hand-built history's start): a huge or negative one is
    # damage, and would overflow the float conversions of every later sum (an int of 400 digits) or a plot's range.
    if not (0 <= t < MAX_T) or not isinstance(name, str):  # NaN compares false: refused too
        return False
    spec = checks.get(name, ())
    if e.get("source") == Source.STORAGE:
        spec = checks.get(STORAGE_PREFIX + name, spec)
    for key, must, accepted in spec:
        value = e.get(key, _ABSENT)
        if value is None and not must and type(None) not in accepted:
            del e[key]  # an optional field written as null (a writer's "unknown") reads as absent, as analysis expects
        elif value is _ABSENT:
            if must:
                return False
        elif not isinstance(value, accepted) or (value.__class__ is bool and bool not in accepted):
            return False
        elif value.__class__ is int and not -MAX_INT < value < MAX_INT:  # beyond a float's or a C long's range
            return False
    return True


MAX_T = 1e12  # seconds: year ~33658, far beyond any clock that writes a history
MAX_INT = 2**63


_ABSENT = object()


def iter_checked(path: Path | str, unreadable: Unreadable) -> Iterator[Event]:
    """Like :func:`iter_history` (chunked parse), but every line that is not a usable event (torn, garbage,
    not UTF-8, a bare number, a non-numeric ``t`` ...) is counted in ``unreadable`` with its line number."""
    for chunk in iter_checked_chunks(path, unreadable):
        yield from chunk


def iter_checked_chunks(path: Path | str, unreadable: Unreadable) -> Iterator[list[Event]]:
    """:func:`iter_checked`'s events, a list per megabyte of lines (for readers that handle events in bulk)."""
    return checked_chunks(_numbered_lines(path), unreadable)


def checked_chunks(numbered_lines: Iterable[list[tuple[int, bytes | None]]],
                   unreadable: Unreadable) -> Iterator[list[Event]]:
    """:func:`iter_checked_chunks` of lines already read (:class:`LineReader`'s)."""
    checks = _field_checks()
    for numbered in numbered_lines:
        whole = [(n, line) for n, line in numbered if line is not None]
        bad = [n for n, line in numbered if line is None]  # too long; then the unusable: counted in line order
        try:
            chunk = _fast_loads(b"[" + b",".join(line for _, line in whole) + b"]")
            if len(chunk) != len(whole):  # a line held several values: judge each line alone
                raise ValueError("misaligned")
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, misaligned
            chunk = [_parse_any(line) for _, line in whole]
        usable = []
        for (line_number, _), e in zip(whole, chunk, strict=True):
            if readable(e, checks):
                usable.append(e)
            else:
                bad.append(line_number)
        for n in sorted(bad):  # the same order however the lines were split into reads
            unreadable.add(n)
        yield usable


def _parse_any(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None
