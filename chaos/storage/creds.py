"""The storage layer acts on the backing directory with the calling process's rights, not its own (root's).

Why: the mount is ``allow_other`` (a container's processes are other users), and a FUSE server running as root
that does every operation as root gives every user root's rights in the checkpoint directory: measured before
this module, ``nobody`` appended to a root-owned 0644 checkpoint, chowned it, deleted one, and created a
root-owned setuid copy of ``/usr/bin/id`` through the mount. Two layers now stop that:

* the mount has ``default_permissions``: the kernel checks modes and owners against the caller before it asks
  the server anything;
* each operation runs in its libfuse thread with the caller's filesystem uid and gid (``setfsuid``/``setfsgid``)
  and supplementary groups (the raw ``setgroups`` system call), which are per thread on Linux: a file the caller
  creates is the caller's, and the backing filesystem refuses what the caller may not do (and clears setuid bits
  as it does for any unprivileged writer). glibc's own ``setgroups`` would change every thread of the server, so
  the system call is made directly.

Standard library only: the layer on a node's host runs with the nodes' Python.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# setgroups(2): per-thread as a raw system call (glibc broadcasts its wrapper to every thread)
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "ppc64le": 81, "s390x": 206}.get(os.uname().machine)
_GROUPS_TTL_S = 1.0

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _libc = None


class CallerRights:
    """Switches a libfuse thread to a caller's filesystem credentials for one operation (:meth:`of`)."""

    def __init__(self) -> None:
        # Only a root server can (and needs to): otherwise the mount is not allow_other, the caller is its user.
        self.enabled = os.geteuid() == 0 and _libc is not None and _SYS_SETGROUPS is not None
        self._groups: dict[int, tuple[float, int, list[int]]] = {}  # pid -> (when read, gid, supplementary)
        self._lock = threading.Lock()
        self._own_groups = os.getgroups() if self.enabled else []  # what a thread goes back to after an operation

    def groups(self, pid: int, gid: int) -> list[int]:
        """The caller's supplementary groups (``/proc/<pid>/status``), briefly remembered per process."""
        now = time.monotonic()
        with self._lock:
            known = self._groups.get(pid)
        if known is not None and known[1] == gid and now - known[0] < _GROUPS_TTL_S:
            return known[2]
        found: list[int] = []
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Groups:"):
                        found = [int(g) for g in line.split()[1:]]
                        break
        except (OSError, ValueError):  # gone, or another pid namespace's: its primary group only
            found = []
        with self._lock:
            if len(self._groups) > 4096:
                self._groups.clear()
            self._groups[pid] = (now, gid, found)
        return found

    @contextmanager
    def of(self, uid: int, gid: int, pid: int) -> Iterator[None]:
        """Run the body with the caller's fsuid, fsgid and groups (nothing to do for root, or a non-root server)."""
        if not self.enabled or (uid == 0 and gid == 0):
            yield
            return
        assert _libc is not None and _SYS_SETGROUPS is not None
        groups = self.groups(pid, gid)
        _setgroups(groups)
        _libc.setfsgid(gid)
        _libc.setfsuid(uid)
        try:
            if _libc.setfsuid(uid) != uid or _libc.setfsgid(gid) != gid:  # returns the current value
                raise PermissionError(f"the storage layer could not take the caller's rights (uid {uid}, gid {gid})")
            yield
        finally:
            _libc.setfsuid(0)
            _libc.setfsgid(0)
            _setgroups(self._own_groups)


def _setgroups(groups: list[int]) -> None:
    assert _libc is not None and _SYS_SETGROUPS is not None
    array = (ctypes.c_uint32 * max(len(groups), 1))(*groups)
    if _libc.syscall(_SYS_SETGROUPS, len(groups), array) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setgroups: {os.strerror(code)}")
