"""Opening a path under a directory descriptor without ever leaving it: no symbolic link followed, no ``..``.

Why: torch-chaos runs as root and acts on files a workload controls (its checkpoint directory). A workload that
plants ``ckpt_999999.pt -> /etc/shadow``, or renames a directory and puts a link in its place between two of the
layer's operations, must not make torch-chaos damage, truncate or read anything outside that directory. So every
path is resolved relative to a directory descriptor: with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``
where the kernel has it (Linux 5.6), else one component at a time with ``O_NOFOLLOW | O_DIRECTORY``. A link met
on the way is ``ELOOP`` (or ``ENOTDIR`` for a directory component), a ``..`` is ``EXDEV``.

Standard library only: the storage layer on a node's host imports this with the nodes' Python.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_SYS_OPENAT2 = 437  # the same number on every architecture (added after the syscall tables were unified)
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover (no libc to load: the walk below still works)
    _libc = None
_openat2_missing = _libc is None


def parts(relpath: str) -> list[str]:
    """The components of a path relative to a directory (``.`` and empty ones dropped); ``EXDEV`` for a ``..``
    or an absolute path, which could only lead out."""
    if relpath.startswith("/"):
        raise OSError(errno.EXDEV, f"{relpath!r} is absolute; expected a path relative to the directory")
    out = [p for p in relpath.split("/") if p not in ("", ".")]
    if ".." in out:
        raise OSError(errno.EXDEV, f"{relpath!r} climbs out of the directory with '..'")
    return out


def _openat2(dir_fd: int, relpath: str, flags: int, mode: int) -> int | None:
    """``openat2`` confined beneath ``dir_fd``; None where the kernel (or a seccomp filter) lacks it."""
    global _openat2_missing
    if _openat2_missing or _libc is None:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, mode & 0o7777 if flags & os.O_CREAT else 0,
                   _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(relpath), ctypes.byref(how), ctypes.sizeof(how))
    if fd >= 0:
        return int(fd)
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM) and not _confirmed():
        _openat2_missing = True
        return None
    if code == errno.EAGAIN:  # the kernel could not resolve it race-free this time: walk instead
        return None
    raise OSError(code, os.strerror(code), relpath)


def _confirmed() -> bool:
    """Whether openat2 works at all here (so that an EPERM was about the file, not a seccomp filter)."""
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_BENEATH)
    assert _libc is not None
    fd = _libc.syscall(_SYS_OPENAT2, -100, b"/", ctypes.byref(how), ctypes.sizeof(how))  # AT_FDCWD, "/"
    if fd < 0:
        return ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM)
    os.close(fd)
    return True


def open_dir(dir_fd: int, components: list[str]) -> int:
    """A descriptor (``O_PATH``) of the directory ``components`` below ``dir_fd``, each component opened with
    ``O_NOFOLLOW | O_DIRECTORY`` (a link or a non-directory on the way: ``ENOTDIR``/``ELOOP``)."""
    fd = os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    for name in components:
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def open_beneath(dir_fd: int, relpath: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of ``relpath`` under ``dir_fd`` that never follows a link (not even the last component, as
    ``O_NOFOLLOW``) and never leaves ``dir_fd``'s tree."""
    names = parts(relpath)
    if not names:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    fd = _openat2(dir_fd, "/".join(names), flags | os.O_NOFOLLOW, mode)
    if fd is not None:
        return fd
    parent = open_dir(dir_fd, names[:-1])
    try:
        return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    finally:
        os.close(parent)


@contextmanager
def parent_of(dir_fd: int, relpath: str) -> Iterator[tuple[int, str]]:
    """``(descriptor of the parent directory, last component)`` of ``relpath`` under ``dir_fd``, for the
    ``*at`` calls (unlink, rename, chmod ... with ``follow_symlinks=False``). The root itself is ``(dir_fd, ".")``."""
    names = parts(relpath)
    if not names:
        yield dir_fd, "."
        return
    fd = open_dir(dir_fd, names[:-1])
    try:
        yield fd, names[-1]
    finally:
        os.close(fd)


def open_path(path: str, flags: int = os.O_RDONLY | os.O_DIRECTORY) -> int:
    """Open an absolute path with no link followed on any component (``/`` is the only trusted start): for a
    directory torch-chaos resolved when the run was planned, which a link swapped in since must not redirect."""
    if not os.path.isabs(path):
        raise OSError(errno.EXDEV, f"{path!r} is not absolute")
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_beneath(root, os.path.normpath(path).lstrip("/"), flags)
    finally:
        os.close(root)
