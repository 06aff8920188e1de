"""torch-chaos's FUSE mounts on this machine: whether it can serve one, find them (fsname ``torch-chaos-<run>``,
type ``fuse.torch-chaos``) and unmount them. Shared by the engine's teardown, ``chaos cleanup`` and the layer on a
node's host (standard library only: it runs on compute hosts that have only the nodes' Python)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass

FSTYPE = "fuse.torch-chaos"
FSNAME_PREFIX = "torch-chaos-"


def fuse_problem() -> str | None:
    """Why this machine cannot serve a FUSE mount, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (a container without --device /dev/fuse, or no fuse module)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing"
    try:
        import mfusepy  # noqa: F401  (loads libfuse3)
    except (ImportError, OSError) as exc:  # mfusepy raises EnvironmentError without libfuse
        return f"libfuse3 or mfusepy is missing ({exc})"
    return None


@dataclass(frozen=True)
class Mount:
    run_id: str
    path: str


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def chaos_mounts(mounts_file: str = "/proc/self/mounts") -> list[Mount]:
    found = []
    try:
        with open(mounts_file) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == FSTYPE and parts[0].startswith(FSNAME_PREFIX):
            found.append(Mount(_unescape(parts[0])[len(FSNAME_PREFIX):], _unescape(parts[1])))
    return found


def is_mounted(path: str) -> bool:
    return any(m.path == path for m in chaos_mounts())


def unmount(path: str) -> bool:
    """Unmount ``path`` (lazily if it is busy); True when it is no longer a torch-chaos mount."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    for args in (["-u"], ["-u", "-z"]):
        if not is_mounted(path):
            return True
        if tool is not None:
            subprocess.run([tool, *args, path], capture_output=True, check=False)
        else:
            subprocess.run(["umount", *(["-l"] if "-z" in args else []), path], capture_output=True, check=False)
    return not is_mounted(path)


def served(path: str) -> bool:
    """Whether some live server answers the mount (a dead one's says ENOTCONN)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno != errno.ENOTCONN
    return True
