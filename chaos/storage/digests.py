"""The sha256 of checkpoint files, computed once per version of a file and off the writer's path.

Hashing in the write path cost the writer ~50 ms per 50 MB here (half the layer's overhead). Instead a save's
digest is computed at ``release``, which the kernel sends after ``close`` has returned to the program, by reading
the file back (from the page cache) through its still-open handle; the result is kept per inode with the size and
modification time it had, so a rename of that file, or a later load of it, reuses it without reading 50 MB again.
A file changed since (any write moves its mtime) is read again. A rename that arrives before the release of the
file it moves (close returned, release still on its way) waits for that digest (``expect``/``wait``).

Reading a save back at its release still put ~10 ms per 9 MB on the save's path (the rename waits for it: a
checkpoint's save measured 1.8x the plain disk's). So a save written in order from its first byte is hashed as its
bytes arrive (:class:`Running`), on one hashing thread beside the writer (hashlib releases the GIL): at the
release only the last write's bytes are left to hash. Anything that makes the bytes hashed differ from the file's
(a write out of order, a second writer of the file, a truncation, a size that does not match at the release, too
much queued) drops the running digest, and the release reads the file back as before.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

CHUNK = 4 << 20
WAIT_S = 10.0
QUEUED_MAX = 64 << 20  # bytes waiting for the hashing thread before a running digest gives up (memory bound)


class Running:
    """The sha256 of a file being written from its first byte, fed each write's bytes in order."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._sha = hashlib.sha256()
        self._lock = threading.Lock()
        self._last: Future[None] | None = None
        self.size = 0  # bytes fed, in order from 0
        self.queued = 0
        self.ok = True

    def feed(self, data: bytes, offset: int) -> None:
        """The bytes one write put at ``offset`` (called after they were written)."""
        with self._lock:
            if not self.ok:
                return
            if offset != self.size or self.queued + len(data) > QUEUED_MAX:
                self.drop()
                return
            self.size += len(data)
            self.queued += len(data)
            self._last = self._pool.submit(self._update, data)

    def _update(self, data: bytes) -> None:
        self._sha.update(data)  # one thread runs every update, in submission order
        with self._lock:
            self.queued -= len(data)

    def drop(self) -> None:
        self.ok = False

    def result(self, size: int) -> str | None:
        """The digest, when every byte of a file of ``size`` bytes was fed; else None."""
        with self._lock:
            last, ok = self._last, self.ok and self.size == size
        if not ok:
            return None
        if last is not None:
            last.result(WAIT_S)
        return self._sha.hexdigest()


class Digests:
    def __init__(self) -> None:
        self._known: dict[int, tuple[int, int, str]] = {}  # inode -> (size, mtime_ns, sha256)
        self._coming: dict[int, threading.Event] = {}
        self._writing: dict[int, list[Running | None]] = {}  # inode -> its open writable handles' running digests
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="torch-chaos-digest")

    def writing(self, fd: int, from_start: bool) -> Running | None:
        """A writable handle opened on ``fd``: a running digest when it starts the file (created or truncated).
        A second writer of the same file drops every running digest of it (its bytes would be missed)."""
        running = Running(self._pool) if from_start else None
        ino = os.fstat(fd).st_ino
        with self._lock:
            writers = self._writing.setdefault(ino, [])
            writers.append(running)
            crowded = len(writers) > 1
            if crowded:
                for other in writers:
                    if other is not None:
                        other.drop()
        return running

    def written(self, fd: int, running: Running | None) -> None:
        """The writable handle's release."""
        ino = os.fstat(fd).st_ino
        with self._lock:
            writers = self._writing.get(ino, [])
            if running in writers:
                writers.remove(running)
            if not writers:
                self._writing.pop(ino, None)

    def truncated(self, ino: int) -> None:
        """A truncation of the file: the bytes hashed so far may no longer be its bytes."""
        with self._lock:
            for running in self._writing.get(ino, []):
                if running is not None:
                    running.drop()

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

    def of_handle(self, fd: int, running: Running | None = None) -> tuple[str, int]:
        """The digest of the file open as ``fd`` (even write-only, even renamed since), remembered; from the
        handle's running digest when it covers the whole file."""
        st = os.fstat(fd)
        sha = self._cached(st)
        if sha is None and running is not None:
            sha = running.result(st.st_size)
            if sha is not None:
                self._keep(st, sha)
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
