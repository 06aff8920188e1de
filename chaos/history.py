"""The history: ``events.jsonl``, one ordered log of everything that happened in a run.

The engine and every workload process append to the same file (one ``write`` per line on an ``O_APPEND``
descriptor, like :mod:`chaos.probe`), so the file is complete up to the moment anything crashed. Analysis reads
it back sorted by the host clock ``t``; nothing else is needed to recompute a run's metrics and verdicts.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class HistoryWriter:
    """Appends engine events; thread-safe, flushed as written."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, event: str, source: str = "engine", **fields: Any) -> Event:
        record: Event = {"t": time.time(), "source": source, "event": event, **fields}
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())
        return record

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass
class FileTail:
    """Reads the lines appended since the last call; a partially written last line waits for the next call."""

    path: Path
    _offset: int = 0
    _partial: bytes = field(default=b"")

    def read_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        return [line.decode(errors="replace") for line in lines if line.strip()]

    def read_new(self) -> Iterator[Event]:
        """The new lines parsed as events (for the history file)."""
        for line in self.read_lines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue



def read_history(path: Path) -> list[Event]:
    """All events sorted by time; a torn last line (writer killed mid-write) is skipped, not fatal."""
    events = []
    with open(path, "rb") as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    events.sort(key=lambda e: e.get("t", 0.0))
    return events
