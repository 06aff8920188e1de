"""Kernel FUSE passthrough for the storage server (``storage.passthrough``, docs/storage.md "Passthrough (opt-in)").

With passthrough the kernel reads and writes an open file's bytes on the server's own descriptor of the backing
file: the server never sees a ``read`` or ``write`` (the storage layer cost 0.36x of the disk's throughput on dd
without it; 1.06-1.22x with it: docs/storage.md, "Passthrough (opt-in)"). libfuse's high-level API (mfusepy) has no
passthrough call, but ``fuse_lib_open``/``fuse_lib_create`` hand the ``fuse_file_info`` the operation filled to
``fuse_reply_open``, which sends ``FOPEN_PASSTHROUGH`` when ``backing_id`` > 0; the id comes from the ioctl that
``fuse_passthrough_open`` wraps (``FUSE_DEV_IOC_BACKING_OPEN`` on the session's /dev/fuse descriptor). INIT must ask
for ``FUSE_CAP_PASSTHROUGH`` and set ``max_backing_stack_depth`` (1: a backing directory on overlayfs, any
container's root, fails ELOOP with 0). Needs libfuse >= 3.17 (:mod:`chaos.storage.libfuse`) loaded by mfusepy
(``FUSE_LIBRARY_PATH``) and CAP_SYS_ADMIN.

Kernel rules (measured, each a fresh mount): one backing id per inode (a second id for an open inode: EIO), and
never passthrough and server-path opens of one inode at once (EIO). So the mode is chosen per inode
(:class:`InodeTable`): a new open takes the mode the inode is open in now; an ioctl that fails (EPERM without
CAP_SYS_ADMIN, ELOOP) puts that inode on the server's path, counted.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FUSE_CAP_PASSTHROUGH = 1 << 29
BACKING_OPEN = 0x4010E501  # _IOW(229, 1, struct fuse_backing_map {int32 fd; uint32 flags; uint64 padding})
BACKING_CLOSE = 0x4004E502  # _IOW(229, 2, uint32_t)
BACKING_ID_OFFSET = 36  # fuse_file_info.backing_id in 3.17 (mfusepy declares a 64-bit poll_events over it)
STACK_DEPTH = 1
FAILURES_KEPT = 5


@dataclass
class Inode:
    """One backing inode open through the mount: its mode, its backing id (0 on the server's path), open count."""

    backing_id: int
    opens: int = 0


@dataclass
class InodeTable:
    """Which backing inodes pass through, shared by libfuse's threads (one lock, held for an ioctl at most).

    ``open_backing(fd)`` returns a backing id or raises OSError; ``close_backing(id)`` gives it back (at the
    inode's last release)."""

    open_backing: Callable[[int], int]
    close_backing: Callable[[int], None]
    inodes: dict[tuple[int, int], Inode] = field(default_factory=dict)
    by_fh: dict[int, tuple[int, int]] = field(default_factory=dict)
    passthrough_opens: int = 0
    slow_opens: int = 0  # regular files served on the server's path (ioctl refused, or the inode open that way)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def opened(self, fh: int) -> int:
        """A regular file opened as ``fh``: the backing id to reply with (0: the server's path)."""
        st = os.fstat(fh)
        if not stat.S_ISREG(st.st_mode):
            return 0
        key = (st.st_dev, st.st_ino)
        with self.lock:
            entry = self.inodes.get(key)
            if entry is None:
                try:
                    entry = Inode(self.open_backing(fh))
                except OSError as exc:
                    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                    if len(self.failures) < FAILURES_KEPT:
                        self.failures.append(name)
                    entry = Inode(0)  # the whole inode on the server's path while it is open (no mixing: EIO)
                self.inodes[key] = entry
            entry.opens += 1
            self.by_fh[fh] = key
            if entry.backing_id:
                self.passthrough_opens += 1
            else:
                self.slow_opens += 1
            return entry.backing_id

    def released(self, fh: int) -> None:
        """``fh``'s release: at the inode's last, its backing id is closed and its mode forgotten."""
        with self.lock:
            key = self.by_fh.pop(fh, None)
            if key is None:
                return
            entry = self.inodes[key]
            entry.opens -= 1
            if entry.opens > 0:
                return
            del self.inodes[key]
            if entry.backing_id:
                try:
                    self.close_backing(entry.backing_id)
                except OSError as exc:  # the kernel drops it with the session anyway
                    if len(self.failures) < FAILURES_KEPT:
                        self.failures.append(f"close {errno.errorcode.get(exc.errno or 0, exc.errno)}")

    def passes_through(self, fh: int) -> bool:
        with self.lock:
            key = self.by_fh.get(fh)
            return key is not None and self.inodes[key].backing_id > 0


def fuse_class(fuse: Any) -> type:
    """mfusepy's ``FUSE`` with passthrough (built on the loaded mfusepy, which must carry the 3.17 layouts)."""
    if (fuse.fuse_version_major, fuse.fuse_version_minor) < (3, 17):
        raise RuntimeError(f"storage.passthrough needs libfuse >= 3.17, and mfusepy loaded {fuse._libfuse_path} "
                           f"({fuse.fuse_version_major}.{fuse.fuse_version_minor}); set FUSE_LIBRARY_PATH "
                           "(python -m chaos.storage build-libfuse)")
    if fuse.fuse_file_info.fh.offset != 16:
        raise RuntimeError("storage.passthrough: mfusepy's fuse_file_info layout is not the one checked (fh at 16)")
    lib = fuse._libfuse
    lib.fuse_get_session.restype = ctypes.c_void_p
    lib.fuse_get_session.argtypes = [ctypes.c_void_p]
    lib.fuse_session_fd.restype = ctypes.c_int
    lib.fuse_session_fd.argtypes = [ctypes.c_void_p]

    class PassthroughFUSE(fuse.FUSE):  # type: ignore[misc,name-defined]
        """Registers each regular file the server opens as its backing file and replies with the id."""

        def __init__(self, operations: Any, mountpoint: str, **kwargs: Any) -> None:
            self.dev_fd = -1
            self.offered = False
            self.table = InodeTable(self._backing_open, self._backing_close)
            self.server = operations
            operations.passthrough_table = self.table
            super().__init__(operations, mountpoint, **kwargs)  # serves until unmounted

        def init_fuse_3(self, conn: Any, config: Any) -> Any:
            c = conn.contents
            self.offered = bool(c.capable_ext & FUSE_CAP_PASSTHROUGH)
            if self.offered:
                c.want_ext |= FUSE_CAP_PASSTHROUGH
                c.want = c.want_ext & 0xFFFFFFFF  # libfuse refuses (EPROTO) a want that differs from want_ext's
                c.max_backing_stack_depth = STACK_DEPTH
            self.server.passthrough_offered(self.offered)
            return super().init_fuse_3(conn, config)

        def _session_fd(self) -> int:
            if self.dev_fd < 0:
                ctx = lib.fuse_get_context().contents
                self.dev_fd = lib.fuse_session_fd(lib.fuse_get_session(ctx.fuse))
            return self.dev_fd

        def _backing_open(self, fd: int) -> int:
            if not self.offered:
                raise OSError(errno.EOPNOTSUPP, "the kernel did not offer passthrough")
            return int(fcntl.ioctl(self._session_fd(), BACKING_OPEN, bytearray(struct.pack("iIQ", fd, 0, 0))))

        def _backing_close(self, backing_id: int) -> None:
            fcntl.ioctl(self._session_fd(), BACKING_CLOSE, bytearray(struct.pack("I", backing_id)))

        def _pass(self, fip: Any) -> None:
            fh = fip.contents.fh
            backing_id = self.table.opened(fh)
            if backing_id:
                ctypes.c_int32.from_address(ctypes.addressof(fip.contents) + BACKING_ID_OFFSET).value = backing_id
            self.server.opened(fh, passed=backing_id > 0)

        def open(self, path: Any, fip: Any) -> int:
            r = super().open(path, fip)
            if r == 0:
                self._pass(fip)
            return int(r)

        def create(self, path: Any, mode: Any, fip: Any) -> int:
            r = super().create(path, mode, fip)
            if r == 0:
                self._pass(fip)
            return int(r)

        def release(self, path: Any, fip: Any) -> int:
            self.table.released(fip.contents.fh)  # RELEASE's own backing_id is 0: the table remembers it
            return int(super().release(path, fip))

    return PassthroughFUSE


def summary(table: InodeTable | None, offered: bool | None, counts: dict[str, int]) -> dict[str, Any]:
    """What a passthrough server did (its log line and ``passthrough.json``): proof that the data passed through."""
    return {"offered": offered, "passthrough_opens": table.passthrough_opens if table else 0,
            "slow_opens": table.slow_opens if table else 0, "failures": table.failures if table else [],
            "server_writes": counts.get("write", 0), "server_reads": counts.get("read", 0)}


def log(line: str) -> None:
    print(f"torch-chaos storage passthrough: {line}", file=sys.stderr, flush=True)
