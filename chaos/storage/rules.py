"""What each filesystem operation suffers under the active storage faults (docs/design.md, "The storage layer").

The server calls :meth:`Rules.check` before every operation it serves and obeys the :class:`Outcome`; it tells
:class:`Rules` what happened (:meth:`Rules.wrote`, :meth:`Rules.synced`, :meth:`Rules.renamed`,
:meth:`Rules.truncated`, :meth:`Rules.removed`) so that rules with state can follow: a ``quota`` counts the bytes
written since it was installed, a ``power_loss`` needs each file's length at its last fsync. One :class:`Rules`
lives in the server for the whole run; a new ``rules.json`` version is installed with :meth:`Rules.install`,
which keeps the per-file and per-rule state. Thread-safe: a multithreaded server may call it from every
operation's thread (one lock, held for microseconds; never while the server sleeps or stalls).

Pure but for two things: :meth:`Rules.install` of a new ``power_loss`` rule truncates the node's unsynced files
in the backing directory (the power loss) and writes what it did to the rule's ``report`` path, which the fault
reads back for the history; and :meth:`Rules.check` of ``open_write`` reads a file's size (its durable length,
when the layer meets the file for the first time). Both reach a file beneath the backing directory with no link
followed (:mod:`chaos.storage.beneath`): a workload that renamed a directory and left a link to elsewhere in its
place gets that file refused (recorded in the report), never truncated through the link; nor is a file with hard
links (another name, maybe outside the directory, for the same bytes).

Rule fields shared by every effect: ``fault_id``, ``effect``, ``kind`` (the fault's, for the record), ``paths``
(a glob on the path relative to the checkpoint directory; ``*`` also matches ``/``), ``node`` (only operations of
processes of that node; ``null`` = every node, and the only value that matches callers whose node is unknown).
Rules are consulted in ``fault_id`` order: the first error wins (an error is answered at once: neither delayed nor
stalled); otherwise the delays of every matching rule add up, and a stalling rule blocks the operation.

A rule says what the layer does by its ``effect`` (:data:`EFFECTS`), which the fault kind that installs it declares
(``layer_effect``, chaos/faults/storagebase.py): the layer knows the effects, never the kinds, so a kind of a
plug-in can use them as the built-in ones do.
"""

from __future__ import annotations

import errno as errno_names
import json
import os
import random
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from chaos.storage.beneath import open_beneath, parent_of

# Operations the server asks about. ``open_write``: create, or open for writing (with or without truncation);
# ``open_read``: open read-only.
OPS = ("open_write", "open_read", "write", "read", "fsync", "rename", "unlink", "release")

# The operation names a rule's ``ops`` may use, and the server operations each covers.
RULE_OPS: dict[str, tuple[str, ...]] = {
    "write": ("write",), "fsync": ("fsync",), "read": ("read",), "rename": ("rename",),
    "open": ("open_write", "open_read"), "open_write": ("open_write",), "open_read": ("open_read",),
    "unlink": ("unlink",),
}
# What a rule does to the operations it matches, named by the rule's ``effect``:
# quota: a write fails with ENOSPC once more than ``after_bytes`` were written since the rule came;
# error: an operation (of ``ops``) fails with ``errno`` (EIO), with ``probability``, at most ``count`` times;
# slow: an operation (of ``ops``) waits ``latency_ms``, and reads and writes share ``bandwidth_bps``;
# stall_fsync: an fsync blocks while the rule is installed;
# power_loss: no operation; at install, the unsynced data of the rule's node is cut (``writeback_s``, ``report``).
EFFECTS = ("quota", "error", "slow", "stall_fsync", "power_loss")


@dataclass(frozen=True)
class Outcome:
    """What to do with one operation: fail it with ``errno`` (a name such as "ENOSPC"), sleep ``delay_s`` first,
    and/or block while the stalling rule is installed (``stall``)."""

    errno: str | None = None
    delay_s: float = 0.0
    stall: bool = False
    fault_id: int | None = None  # the rule that decided it (for storage_op_failed)
    # The rules whose latency or bandwidth made up ``delay_s``: the delay ends early when all of them are healed,
    # so no operation still sleeps a latency of a fault that is over (a run would hang after the heal).
    delay_ids: tuple[int, ...] = ()


PASS = Outcome()


@dataclass
class FileState:
    """What power loss would do to one file: cut it back to ``durable`` bytes if one of ``dirty_nodes`` loses
    power before the next fsync."""

    durable: int = 0  # length at the last fsync (or when first seen, for a file that existed untouched)
    dirty_nodes: set[str | None] = field(default_factory=set)
    last_write: float = 0.0  # clock() of the last write (for a rule's ``writeback_s``)


@dataclass
class RuleState:
    """What one rule has counted since it was installed (kept across installs while the rule stays)."""

    written: int = 0  # quota: bytes written to matching files
    failures: int = 0  # error: operations failed so far (for ``count``)
    busy_until: float = 0.0  # slow: when the bandwidth cap is free again (clock seconds)
    rng: random.Random = field(default_factory=random.Random)


class RuleError(ValueError):
    """A rule the layer cannot enforce (an unknown effect or errno): refused at install, so the fault fails."""


def errno_value(name: str) -> int:
    """The number of an errno name (``ENOSPC`` -> 28); :class:`RuleError` for a name this system lacks."""
    value = getattr(errno_names, name, None)
    if not isinstance(value, int) or not name.startswith("E"):
        raise RuleError(f"unknown errno {name!r}")
    return value


class Rules:
    def __init__(self, backing: Path, clock: Callable[[], float] = time.monotonic):
        self.backing = backing  # the directory holding the real bytes (a power loss truncates files there)
        self.version = 0
        self.rules: list[dict[str, Any]] = []
        self.files: dict[str, FileState] = {}
        self._state: dict[int, RuleState] = {}
        # operations each rule (fault_id) matched since it was installed, kept after its removal: a rule that matched
        # nothing while it lasted is a fault that never acted (the engine records it as not injected)
        self.matched: dict[int, int] = {}
        self._clock = clock
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ rules.json
    def install(self, document: dict[str, Any]) -> None:
        """A new ``rules.json`` (``{"version": n, "rules": [...]}``) takes effect for the next operation.

        A rule seen for the first time starts its counters at zero (a ``quota`` counts from its injection); a
        new ``power_loss`` rule is the power loss itself, applied here, once. Raises :class:`RuleError` for a
        rule it cannot enforce, before changing anything (the server then does not acknowledge the version, and
        the fault is recorded as failed)."""
        with self._lock:
            rules = sorted((dict(r) for r in document.get("rules", [])), key=lambda r: int(r["fault_id"]))
            for rule in rules:
                _validate(rule)
            fresh = [r for r in rules if int(r["fault_id"]) not in self._state]
            self.version = int(document.get("version", 0))
            self.rules = rules
            live = {int(r["fault_id"]) for r in rules}
            self._state = {fid: s for fid, s in self._state.items() if fid in live}
            for rule in fresh:
                self._state[int(rule["fault_id"])] = RuleState(rng=random.Random(int(rule["fault_id"])))
                self.matched[int(rule["fault_id"])] = 0
                if rule["effect"] == "power_loss":
                    self._power_loss(rule)

    def stalled(self, fault_id: int | None) -> bool:
        """Whether the rule that stalled an operation is still installed (the server re-asks while it waits)."""
        with self._lock:
            return any(rule.get("fault_id") == fault_id for rule in self.rules)

    def any_installed(self, fault_ids: tuple[int, ...]) -> bool:
        """Whether any of the rules that delay an operation is still installed (the server re-asks while it
        sleeps: a healed slow rule releases the operations it was slowing)."""
        with self._lock:
            return any(rule.get("fault_id") in fault_ids for rule in self.rules)

    # ------------------------------------------------------------------ before an operation
    def check(self, op: str, relpath: str, node: str | None, nbytes: int = 0) -> Outcome:
        """Before serving ``op`` on ``relpath`` (relative to the checkpoint directory) for a process of ``node``;
        ``nbytes``: the size of a write or read."""
        with self._lock:
            if op == "open_write" and relpath not in self.files:
                self.files[relpath] = FileState(durable=self._size(relpath))
            delay, stall_id, delay_ids = 0.0, None, []
            for rule in self.rules:
                if not _matches(rule, op, relpath, node):
                    continue
                fid, effect = int(rule["fault_id"]), rule["effect"]
                state = self._state[fid]
                self.matched[fid] = self.matched.get(fid, 0) + 1
                if effect == "quota" and op == "write" and nbytes > 0 and \
                        state.written + nbytes > int(rule.get("after_bytes", 0)):
                    return Outcome(errno="ENOSPC", fault_id=fid)
                if effect == "error":
                    count = rule.get("count")
                    if (count is None or state.failures < int(count)) and \
                            state.rng.random() < float(rule.get("probability", 1.0)):
                        state.failures += 1
                        return Outcome(errno=str(rule.get("errno", "EIO")), fault_id=fid)
                if effect == "slow":
                    delay_ids.append(fid)
                    delay += float(rule.get("latency_ms", 0.0)) / 1000.0
                    bps = rule.get("bandwidth_bps")
                    if bps and op in ("write", "read") and nbytes > 0:
                        now = self._clock()
                        start = max(now, state.busy_until)
                        state.busy_until = start + nbytes / float(bps)
                        delay += state.busy_until - now
                if effect == "stall_fsync" and stall_id is None:
                    stall_id = fid
            if op == "unlink":
                self.files.pop(relpath, None)
            if delay == 0.0 and stall_id is None:
                return PASS
            return Outcome(delay_s=delay, stall=stall_id is not None, fault_id=stall_id,
                           delay_ids=tuple(delay_ids) if delay > 0.0 else ())

    # ------------------------------------------------------------------ after an operation
    def wrote(self, relpath: str, node: str | None, offset: int, nbytes: int) -> None:
        """``nbytes`` were written at ``offset`` of ``relpath`` by ``node``."""
        with self._lock:
            state = self.files.setdefault(relpath, FileState())
            state.dirty_nodes.add(node)
            state.last_write = self._clock()
            for rule in self.rules:
                if rule["effect"] == "quota" and _matches(rule, "write", relpath, node):
                    self._state[int(rule["fault_id"])].written += nbytes

    def synced(self, relpath: str) -> None:
        """``relpath`` was fsynced (fdatasync counts too): everything written so far is durable."""
        with self._lock:
            self.files[relpath] = FileState(durable=self._size(relpath))

    def truncated(self, relpath: str, length: int, node: str | None = None) -> None:
        """``relpath`` was cut to ``length`` bytes (an open with O_TRUNC, or ftruncate) by ``node``.

        Not durable until the next fsync, but power loss cannot bring back bytes that are gone: the durable
        length becomes at most ``length`` (a file rewritten in place without fsync comes back empty, the
        zero-length file of ext4)."""
        with self._lock:
            state = self.files.setdefault(relpath, FileState(durable=length))
            state.durable = min(state.durable, length)
            state.dirty_nodes.add(node)
            state.last_write = self._clock()

    def renamed(self, old: str, new: str) -> None:
        """Per-file state follows a rename, of a file or of a directory (every path under it moves); what it
        replaced is gone."""
        with self._lock:
            moved = {path: state for path, state in self.files.items() if _under(path, old)}
            for path in [p for p in self.files if _under(p, new) or p in moved]:
                del self.files[path]
            for path, state in moved.items():
                self.files[new + path[len(old):]] = state

    def removed(self, relpath: str) -> None:
        """``relpath`` was unlinked (also done by ``check("unlink")`` when no rule failed it)."""
        with self._lock:
            self.files.pop(relpath, None)

    # ------------------------------------------------------------------ power_loss
    def _power_loss(self, rule: dict[str, Any]) -> None:
        """Cut every file with unsynced data of the rule's node back to its length at its last fsync."""
        node = rule.get("node")
        writeback = rule.get("writeback_s")
        now = self._clock()
        cut: list[dict[str, Any]] = []
        paths = str(rule.get("paths") or "*")
        matched = sum(1 for relpath in self.files if fnmatchcase(relpath, paths))  # a glob that matched nothing
        for relpath, state in sorted(self.files.items()):
            if node not in state.dirty_nodes or not fnmatchcase(relpath, paths):
                continue
            if writeback is not None and now - state.last_write >= float(writeback):
                state.durable = self._size(relpath)  # the kernel had written it back by then
                state.dirty_nodes.clear()
                continue
            done = self._cut(relpath, state.durable)
            if done is not None:
                cut.append(done)
            state.dirty_nodes.clear()
        report = rule.get("report")
        if report:
            tmp = Path(f"{report}.tmp")
            tmp.write_text(json.dumps({"fault_id": rule["fault_id"], "node": node, "truncated": cut,
                                       "matched": matched}))
            os.replace(tmp, report)

    def _cut(self, relpath: str, durable: int) -> dict[str, Any] | None:
        """Truncate one file to ``durable`` bytes, reached beneath the backing directory with no link followed;
        what was done (or refused, with why), None when there was nothing to cut."""
        try:
            root = os.open(self.backing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            return {"path": relpath, "error": f"the checkpoint directory cannot be opened: {exc.strerror}"}
        try:
            try:
                fd = open_beneath(root, relpath, os.O_WRONLY | os.O_NONBLOCK)
            except FileNotFoundError:  # removed meanwhile: nothing to lose
                return None
            except OSError as exc:
                return {"path": relpath, "error": _refused(relpath, exc), "refused": True}
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    return {"path": relpath, "error": "refused: not a regular file", "refused": True}
                if st.st_nlink > 1:
                    return {"path": relpath, "refused": True,
                            "error": f"refused: it has {st.st_nlink} hard links (names of the same bytes elsewhere, "
                                     "maybe outside the checkpoint directory)"}
                if st.st_size > durable:
                    os.ftruncate(fd, durable)
                    return {"path": relpath, "bytes": st.st_size, "kept": durable}
                return None
            except OSError as exc:
                return {"path": relpath, "error": str(exc)}
            finally:
                os.close(fd)
        finally:
            os.close(root)

    def _size(self, relpath: str) -> int:
        """A file's size as it is now (0 for one missing, or reached only through a link)."""
        try:
            root = os.open(self.backing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            with parent_of(root, relpath) as (parent, name):
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            return st.st_size if stat.S_ISREG(st.st_mode) else 0
        except OSError:
            return 0
        finally:
            os.close(root)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def _refused(relpath: str, exc: OSError) -> str:
    """Why a file of the checkpoint directory was not touched (a link on its way, most likely)."""
    if exc.errno in (errno_names.ELOOP, errno_names.ENOTDIR, errno_names.EXDEV):
        return (f"refused: {relpath} is reached through a symbolic link (a directory renamed and a link left in its "
                "place?), which could lead out of the checkpoint directory")
    return f"refused: {exc.strerror or exc}"


def _validate(rule: dict[str, Any]) -> None:
    if "fault_id" not in rule or rule.get("effect") not in EFFECTS:
        raise RuleError(f"a rule needs a fault_id and an effect among {', '.join(EFFECTS)}: {rule}")
    for op in rule.get("ops") or ():
        if op not in RULE_OPS:
            raise RuleError(f"unknown operation {op!r} (expected one of {', '.join(RULE_OPS)})")
    if rule["effect"] == "error":
        errno_value(str(rule.get("errno", "EIO")))
    paths = str(rule.get("paths") or "*")
    if paths.startswith("/") or ".." in paths.split("/"):
        raise RuleError(f"paths: expected a glob relative to the checkpoint directory, got {paths!r}")


def _matches(rule: dict[str, Any], op: str, relpath: str, node: str | None) -> bool:
    """Whether ``rule`` applies to ``op`` on ``relpath`` by ``node`` (its paths, node and operations)."""
    if rule.get("node") is not None and rule["node"] != node:
        return False
    if not fnmatchcase(relpath, str(rule.get("paths") or "*")):
        return False
    effect = rule["effect"]
    if effect == "quota":
        return op == "write"
    if effect == "stall_fsync":
        return op == "fsync"
    if effect == "power_loss":
        return False
    ops = rule.get("ops")
    if not ops:
        return op != "release" and op != "unlink"
    return any(op in RULE_OPS[name] for name in ops)
