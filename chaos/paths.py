"""The blast radius: every path torch-chaos writes, corrupts or mounts stays inside the run directory, or inside
a directory the scenario names in ``allow_paths``.

A fault such as ``corrupt_checkpoint`` damages and deletes files in the checkpoint directory; a checkpoint
directory of ``../..`` or ``/`` would let it damage anything the user can write. So a path field is judged
twice: at validation, on its text (a relative path may not climb out of the run directory; an absolute one must
resolve, symlinks followed, inside an allowed directory), and when the plan is built, on the resolved path under
the real run directory (:func:`confine`), which also catches symlinks on the way.

The run directory itself is refused as a checkpoint directory: its own ``events.jsonl``, logs and plan would be
taken for checkpoints (and damaged by checkpoint faults). A subdirectory is required.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import uuid
from pathlib import Path

RUN_DIR_ITSELF = ("is the run directory itself, whose events.jsonl and logs would be taken for checkpoints; "
                  "name a subdirectory, e.g. checkpoints")


# The variable naming the golden-run cache's directory (chaos.golden); here, in a module without dependencies, so
# that `chaos --golden-cache DIR` sets it without importing the engine.
GOLDEN_CACHE_ENV = "TORCH_CHAOS_GOLDEN_CACHE"

# What torch-chaos itself keeps in a run directory (docs/design.md, "The flow"): never a checkpoint directory.
RUN_OWN = frozenset({"events.jsonl", "events.jsonl.acks", "spool", "logs", "scenario.yaml", "plan.yaml", "result.json",
                     "golden.json", ".storage", "report.html", "report.md", "report.json", "report.junit.xml"})


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# The system's own trees: never a place torch-chaos (root, as a rule) may write, damage or mount over, whatever a
# scenario says. An ``allow_paths`` entry inside one (``/etc``, ``/dev`` as a FUSE mount for the run's length) or
# holding one (``/``, ``/var``), and a checkpoint directory that resolves into one, are refused.
SYSTEM_TREES = ("/", "/dev", "/proc", "/sys", "/etc", "/usr", "/boot", "/root", "/var/lib/docker", "/bin", "/sbin",
                "/lib", "/lib32", "/lib64", "/libx32", "/run", "/var/run")


def system_tree(real: str) -> str | None:
    """The system tree a resolved path is inside (or, for ``/``, is), or one it holds; None for neither."""
    first = real.strip("/").split("/")[0]
    trees = [*SYSTEM_TREES, *(f"/{first}",) * first.startswith("lib")]  # every /lib* of a multilib system
    for tree in trees:
        if tree == "/":
            if real == "/":
                return tree
            continue
        if _within(real, tree) or _within(tree, real):
            return tree
    return None


def not_a_directory(path: str | Path) -> str | None:
    """Why ``path`` cannot be (or be made) a directory, or None: it, or the nearest of its parents that exists, is
    something else (a regular file, a link to nothing, a device). The engine creates a missing checkpoint directory
    with its parents; over a file that was a traceback (FileExistsError) with the run directory half made."""
    here = os.fspath(path)
    while not os.path.lexists(here):
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
    if os.path.isdir(here):
        return None
    what = ("a regular file" if os.path.isfile(here) else "a link to nothing" if os.path.islink(here)
            else "not a directory (a device, a pipe or a socket)")
    where = "" if here == os.fspath(path) else f" (a parent of {os.fspath(path)})"
    return (f"{here}{where} exists and is {what}, not a directory: checkpoints are kept in a directory (created "
            "when missing); name a directory, or remove the file")


def check_allowed(entry: str) -> str | None:
    """What is wrong with one ``allow_paths`` entry, or None."""
    if not entry or not os.path.isabs(entry):
        return f"expected an absolute path, got {entry!r}"
    if "\0" in entry:
        return "a path cannot contain a NUL character"
    real = os.path.realpath(entry)
    if real == "/":
        return "the filesystem root cannot be allowed; name the directory torch-chaos may write in"
    if (tree := system_tree(real)) is not None:
        shown_real = "" if real == os.path.normpath(entry) else f" (it resolves to {real})"
        return (f"{entry!r}{shown_real} is or holds the system directory {tree}, where torch-chaos never writes, "
                "damages or mounts; expected a directory of your own, e.g. /data/checkpoints")
    return None


def check_path(value: str, allow_paths: list[str]) -> str | None:
    """What is wrong with a path field as written in the scenario (relative to the run directory), or None."""
    if not value.strip():
        return "expected a path, got an empty one"
    if "\0" in value:
        return "a path cannot contain a NUL character"
    if os.path.isabs(value):
        real = os.path.realpath(value)
        if any(_within(real, os.path.realpath(a)) for a in allow_paths if "\0" not in a):
            if (tree := system_tree(real)) is not None:
                return f"{value!r} resolves to {real}, in or over the system directory {tree}; torch-chaos never " \
                       "writes or damages files there"
            return not_a_directory(value)
        return (f"{value!r} is outside the run directory (it resolves to {real}); torch-chaos writes and damages "
                "files there, so list the directory in allow_paths to permit it")
    norm = posixpath.normpath(value)
    if norm == ".":
        return f"{value!r} {RUN_DIR_ITSELF}"
    if norm.split("/")[0] in RUN_OWN:
        return (f"{value!r} is where torch-chaos keeps the run's own {norm.split('/')[0]}; checkpoint faults would "
                "damage it. Name another subdirectory, e.g. checkpoints")
    if norm == ".." or norm.startswith("../"):
        return (f"{value!r} leaves the run directory; give a subdirectory of it, or an absolute path listed in "
                "allow_paths")
    return None


def confine(path: Path, run_dir: Path, allow_paths: list[str]) -> str | None:
    """What is wrong with a resolved path of a run about to start (symlinks followed), or None."""
    real, run = os.path.realpath(path), os.path.realpath(run_dir)
    if real == run or _within(run, real):
        return f"{path} {RUN_DIR_ITSELF}" if real == run else f"{path} contains the run directory"
    if (tree := system_tree(real)) is not None and not _within(real, run):
        return f"{path} resolves to {real}, in or over the system directory {tree}; torch-chaos refuses to write " \
               "or damage files there"
    if _within(real, run) or any(_within(real, os.path.realpath(a)) for a in allow_paths):
        return None
    return (f"{path} resolves to {real}, outside the run directory {run} and every allow_paths entry; "
            "torch-chaos refuses to write or damage files there")


# A run directory may come from elsewhere (a CI artifact unpacked, a colleague's copy): a symlink named result.json
# or report.html in it must not make `chaos report` write through it to a file outside. Outputs are written to a new
# file beside their name and renamed over it, which replaces a link instead of following it (and a reader never
# sees half a file).
def shown(path: str | Path) -> str:
    """A path as a report prints it: its bytes as UTF-8, any byte that is not UTF-8 as ``\\xNN``.

    A name that is not UTF-8 (``run-\\xff``) comes back from the OS as lone surrogates, which no UTF-8 file can
    hold: a report embedding the raw name could not be written at all."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def write_output(path: str | Path, data: str | bytes, *, named_by_user: bool = False) -> Path:
    """``data`` as the file ``path`` (a link there is replaced, not followed); returns ``path``.

    ``named_by_user``: the user gave this path (``-o``), so a link or a device there is written through, as any
    program writes its named output (``-o /dev/stdout``); only a regular file is replaced by a rename."""
    path = Path(path)
    blob = data.encode() if isinstance(data, str) else data
    if named_by_user and (path.is_symlink() or (path.exists() and not path.is_file())):
        with open(path, "wb") as f:
            f.write(blob)
        return path
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    # O_EXCL: a new file, never one planted under this name; mode 0666 less the umask, as open() makes a file
    # (mkstemp's 0600 would hide a report on a shared machine, a fixed 0644 would ignore a umask of 077).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def open_regular(path: str | Path, what: str = "") -> int:
    """A read-only descriptor of ``path``, which must be a regular file (OSError naming it otherwise).

    Opened without blocking (a FIFO with no writer would wait forever), then judged by what was opened, not by a
    stat of the name that a swap could make stale; a device (a link to /dev/zero) would never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file (a directory, device, pipe or socket){what}")
    return fd


class TooLarge(OSError):
    """A file read back by :func:`read_small` is larger than its limit."""


def read_small(path: str | Path, limit: int) -> bytes:
    """The bytes of a small file torch-chaos reads back (a scenario, a run's plan.yaml, golden.json), at most
    ``limit`` of them (TooLarge beyond); OSError, with the reason in words, for anything but a regular file."""
    with os.fdopen(open_regular(path), "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{path} is larger than {limit} bytes")
    return data
