"""What each filesystem operation suffers under the active storage faults (docs/design.md, "The storage layer").

The server calls :meth:`Rules.check` before every operation it serves and obeys the :class:`Outcome`; it tells
:class:`Rules` what happened (bytes written, fsyncs) so that rules with state (``disk_full`` counting bytes,
``lost_writes`` tracking unsynced data) can follow. One :class:`Rules` lives in the server for the whole run; a new
``rules.json`` version is installed with :meth:`Rules.install`, which keeps the per-file state.

Status: interface only; the storage fault kinds fill it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Operations the server asks about. ``open_write``: create, or open for writing (with or without truncation);
# ``open_read``: open read-only.
OPS = ("open_write", "open_read", "write", "read", "fsync", "rename", "unlink", "release")


@dataclass(frozen=True)
class Outcome:
    """What to do with one operation: fail it with ``errno`` (a name such as "ENOSPC"), sleep ``delay_s`` first,
    and/or block while the stalling rule is installed (``stall``)."""

    errno: str | None = None
    delay_s: float = 0.0
    stall: bool = False
    fault_id: int | None = None  # the rule that decided it (for storage_op_failed)


PASS = Outcome()


class Rules:
    def __init__(self, backing: Path):
        self.backing = backing  # the directory holding the real bytes (lost_writes truncates files there)
        self.version = 0
        self.rules: list[dict[str, Any]] = []

    def install(self, document: dict[str, Any]) -> None:
        """A new ``rules.json`` (``{"version": n, "rules": [...]}``) takes effect for the next operation."""
        self.version = int(document.get("version", 0))
        self.rules = list(document.get("rules", []))

    def check(self, op: str, relpath: str, node: str | None, nbytes: int = 0) -> Outcome:
        """Before serving ``op`` on ``relpath`` (relative to the checkpoint directory) for a process of ``node``."""
        return PASS

    def stalled(self, fault_id: int | None) -> bool:
        """Whether the rule that stalled an operation is still installed (the server re-asks while it waits)."""
        return any(rule.get("fault_id") == fault_id for rule in self.rules)

    def wrote(self, relpath: str, node: str | None, offset: int, nbytes: int) -> None:
        """``nbytes`` were written at ``offset`` of ``relpath`` by ``node``."""

    def synced(self, relpath: str) -> None:
        """``relpath`` was fsynced: everything written so far is durable."""

    def renamed(self, old: str, new: str) -> None:
        """Per-file state follows a rename."""
