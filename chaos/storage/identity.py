"""Who called: the node of the process behind a FUSE request, read from ``/proc/<pid>/environ``.

FUSE gives the server the caller's thread id with every request. The node is the ``CHAOS_NODE`` the plan put
into every node's environment (inherited by torchrun's workers); a process without it (a shell, a tool) is
``None``. Cached per (pid, start time), so a recycled pid is never given an older process's node.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

ENV_NODE = b"CHAOS_NODE="


@dataclass(frozen=True)
class Caller:
    node: str | None
    pid: int  # the caller's process (thread group) id, as the host sees it
    tid: int


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _start_time(tid: int) -> str:
    stat = _read(f"/proc/{tid}/stat")
    tail = stat[stat.rfind(b")") + 2:].split()  # fields after the command name, which may hold spaces
    return tail[19].decode() if len(tail) > 19 else ""


SIGKILL_BIT = 1 << 8  # signal 9 in /proc/<tid>/status's pending masks


def exiting(tid: int) -> bool:
    """Whether the thread is on its way out (PF_EXITING: killed, or exiting with files still open; or a SIGKILL
    pending), or gone.

    A file closed by the kernel while its process dies was not closed by the program: a save cut short."""
    stat = _read(f"/proc/{tid}/stat")
    if not stat:
        return True
    tail = stat[stat.rfind(b")") + 2:].split()
    try:
        if int(tail[6]) & 0x4 or tail[0] in (b"Z", b"X"):
            return True
    except (IndexError, ValueError):
        return True
    for line in _read(f"/proc/{tid}/status").splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & SIGKILL_BIT:
            return True
    return False


class Callers:
    """Resolves FUSE request pids to :class:`Caller`; thread-safe."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], Caller] = {}
        self._lock = threading.Lock()

    def of(self, tid: int) -> Caller:
        if tid <= 0:
            return Caller(None, 0, 0)
        key = (tid, _start_time(tid))
        with self._lock:
            found = self._cache.get(key)
        if found is not None:
            return found
        pid = tid
        for line in _read(f"/proc/{tid}/status").splitlines():
            if line.startswith(b"Tgid:"):
                pid = int(line.split()[1])
                break
        node = None
        for entry in _read(f"/proc/{tid}/environ").split(b"\0"):
            if entry.startswith(ENV_NODE):
                node = entry[len(ENV_NODE):].decode(errors="replace")
                break
        caller = Caller(node, pid, tid)
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = caller
        return caller
