"""The sha256 of checkpoint files, computed once per version of a file and off the writer's path.

Hashing in the write path cost the writer ~50 ms per 50 MB here (half the layer's overhead). Instead a save's
digest is computed at ``release``, which the kernel sends after ``close`` has returned to the program, by reading
the file back (from the page cache) through its still-open handle; the result is kept per inode with the size and
modification time it had, so a rename of that file, or a later load of it, reuses it without reading 50 MB again.
A file changed since (any write moves its mtime) is read again. A rename that arrives before the release of the
file it moves (close returned, release still on its way) waits for that digest (``expect``/``wait``).
"""

from __future__ import annotations

import hashlib
import os
import threading

CHUNK = 4 << 20
WAIT_S = 10.0


class Digests:
    def __init__(self) -> None:
        self._known: dict[int, tuple[int, int, str]] = {}  # inode -> (size, mtime_ns, sha256)
        self._coming: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _read(self, fd: int) -> tuple[str, int]:
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, CHUNK):
            h.update(chunk)
            size += len(chunk)
        return h.hexdigest(), size

    def _cached(self, st: os.stat_result) -> str | None:
        with self._lock:
            known = self._known.get(st.st_ino)
        return known[2] if known is not None and known[:2] == (st.st_size, st.st_mtime_ns) else None

    def _keep(self, st: os.stat_result, sha: str) -> None:
        with self._lock:
            if len(self._known) > 100_000:
                self._known.clear()
            self._known[st.st_ino] = (st.st_size, st.st_mtime_ns, sha)

    def of_handle(self, fd: int) -> tuple[str, int]:
        """The digest of the file open as ``fd`` (even write-only, even renamed since), remembered."""
        st = os.fstat(fd)
        sha = self._cached(st)
        if sha is None:
            rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
            try:
                sha, _ = self._read(rfd)
            finally:
                os.close(rfd)
            self._keep(st, sha)
        return sha, st.st_size

    def of_open(self, fd: int) -> tuple[str, int]:
        """The digest of the file open for reading as ``fd`` (read from its current offset: a fresh open)."""
        st = os.fstat(fd)
        with self._lock:
            coming = self._coming.get(st.st_ino)
        if coming is not None:
            coming.wait(WAIT_S)
        sha = self._cached(st)
        if sha is None:
            sha, _ = self._read(fd)
            self._keep(st, sha)
        return sha, st.st_size

    def expect(self, fd: int) -> None:
        """The file open as ``fd`` was closed; its digest is coming with its release."""
        with self._lock:
            self._coming[os.fstat(fd).st_ino] = threading.Event()

    def arrived(self, fd: int) -> None:
        with self._lock:
            event = self._coming.pop(os.fstat(fd).st_ino, None)
        if event is not None:
            event.set()
