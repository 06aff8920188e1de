"""The storage layer's fallback where FUSE is missing: an inotify watch on the checkpoint directory.

It writes the same ``checkpoint_save_started`` / ``checkpoint_save_finished`` / ``checkpoint_deleted`` events
(source ``storage``) at the engine's tick (20 ms) instead of inside the operation, so it cannot hold an operation,
inject a storage fault or see a read (no ``checkpoint_loaded``), and it knows no node or pid (``null``). A file
closed by the kernel for a killed process also counts as finished here: only FUSE tells a crash from a close.
Standard library only (ctypes over libc's inotify calls): nothing to install where FUSE is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import struct
from pathlib import Path

from chaos.events import Ev, Source
from chaos.history import HistoryWriter
from chaos.storage.record import step_in_name

IN_MODIFY, IN_CLOSE_WRITE = 0x2, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_ISDIR = 0x40000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_HEADER = struct.Struct("iIII")
WATCHED = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE


class InotifyWatcher:
    def __init__(self, directory: Path, history: HistoryWriter):
        self.directory = directory
        self.history = history
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, str(directory).encode(), WATCHED) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify on {directory}: {os.strerror(err)}")
        self.writing: set[str] = set()  # files with a save_started and no save_finished yet
        self.moved_from: dict[int, str] = {}

    def _emit(self, event: str, name: str, **fields: object) -> None:
        step = step_in_name(name)  # the watcher cannot ask the job's progress: a number of the name, or none
        self.history.write(event, source=Source.STORAGE, node=None, pid=None, path=str(self.directory / name),
                           step=step, **({"step_from": "name"} if step is not None else {}), **fields)

    def _finished(self, name: str, **fields: object) -> None:
        h, size = hashlib.sha256(), 0
        try:
            with open(self.directory / name, "rb") as f:
                while chunk := f.read(4 << 20):
                    h.update(chunk)
                    size += len(chunk)
        except OSError:
            return  # already gone again
        self._emit(Ev.CHECKPOINT_SAVE_FINISHED, name, sha256=h.hexdigest(), bytes=size, **fields)

    def poll(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                return
            offset = 0
            while offset + _HEADER.size <= len(data):
                _wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size:offset + _HEADER.size + length].rstrip(b"\0").decode(
                    errors="surrogateescape")
                offset += _HEADER.size + length
                if name and not mask & IN_ISDIR:
                    self._handle(mask, cookie, name)

    def _handle(self, mask: int, cookie: int, name: str) -> None:
        if mask & (IN_CREATE | IN_MODIFY) and name not in self.writing:
            self.writing.add(name)
            self._emit(Ev.CHECKPOINT_SAVE_STARTED, name)
        if mask & IN_CLOSE_WRITE and name in self.writing:
            self.writing.discard(name)
            self._finished(name)
        if mask & IN_MOVED_FROM:
            self.moved_from[cookie] = name
            self._emit(Ev.CHECKPOINT_DELETED, name)
        if mask & IN_MOVED_TO:
            source = self.moved_from.pop(cookie, None)
            self._finished(name, **({"renamed_from": str(self.directory / source)} if source else {}))
        if mask & IN_DELETE:
            self.writing.discard(name)
            self._emit(Ev.CHECKPOINT_DELETED, name)

    def close(self) -> None:
        self.poll()
        with contextlib.suppress(OSError):
            os.close(self.fd)
