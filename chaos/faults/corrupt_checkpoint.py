"""Checkpoint damage on the storage: truncate, flip bytes in, or delete the newest checkpoint.

A truncated file is rejected by ``torch.load``, but flipped bytes in the middle load silently (measured, see
docs/design.md, "Runtimes and fault mechanisms"): only a digest recorded at save time catches them, which is
exactly what this fault tests.

The damage never leaves the checkpoint directory (the engine runs as root; the directory is the workload's): the
directory is opened with no link followed on any component, the newest file beneath it the same way; a newest
checkpoint that is a link out of the directory (``ckpt_999999.pt -> /elsewhere/victim.bin``), or a file with hard
links outside it, is refused. A refused fault did not happen: it is ``fault_failed`` with the reason, and the run
does not pass on it.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaos.capabilities import CHECKPOINT_STORAGE
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec
from chaos.storage.beneath import open_beneath, open_path, parent_of

_STEP = re.compile(r"(\d+)")
_SIDECAR_SUFFIXES = (".sha256", ".json", ".tmp")


class Refused(RuntimeError):
    """The newest checkpoint cannot be damaged without reaching outside the checkpoint directory: the fault does
    not happen (``fault_failed``, with this reason; a planned fault that did not happen fails the run)."""


@dataclass(frozen=True)
class Target:
    name: str  # the newest checkpoint's entry in the checkpoint directory
    relpath: str  # what is damaged: the entry itself, or the file inside the directory its link names
    step: int | None


def newest_checkpoint(dir_fd: int) -> Target | None:
    """The checkpoint with the highest step number in its name (mtime breaks ties and nameless cases), among the
    directory's regular files and links (a link is judged, not skipped: it may be how the job names its newest)."""
    candidates: list[tuple[int, float, str]] = []
    for entry in os.scandir(dir_fd):
        if entry.name.startswith(".") or entry.name.endswith(_SIDECAR_SUFFIXES):
            continue
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            numbers = _STEP.findall(entry.name)
            candidates.append((int(numbers[-1]) if numbers else -1, st.st_mtime, entry.name))
    if not candidates:
        return None
    number, _, name = max(candidates)
    return Target(name, name, number if number >= 0 else None)


def through_link(dir_fd: int, directory: Path, target: Target) -> Target:
    """A newest checkpoint that is a symbolic link: the file it names, if that is inside the checkpoint directory
    (a ``latest_<n>.pt`` beside its target); :class:`Refused` for one that leads out of it."""
    link = os.readlink(target.name, dir_fd=dir_fd)
    inside = os.path.normpath(os.path.relpath(link, directory) if os.path.isabs(link) else link)
    if inside == ".." or inside.startswith("../") or inside == ".":
        raise Refused(f"the newest checkpoint {target.name} is a symbolic link to {link}, outside the checkpoint "
                      f"directory {directory}; torch-chaos damages nothing outside it, so the fault did not happen")
    return Target(target.name, inside, target.step)


def _links_inside(dir_fd: int, st: os.stat_result) -> int:
    """How many names the checkpoint directory's tree has for the file ``st`` (links never followed)."""
    found = 0
    for _, _, files, root_fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for name in files:
            try:
                other = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                continue
            found += (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
    return found


def damage(dir_fd: int, directory: Path, target: Target, mode: str) -> str:
    """Damage ``target`` reached beneath ``dir_fd`` (no link followed on any component); :class:`Refused` for a
    file that is not a regular file of the checkpoint directory's own."""
    if mode == "delete":  # removes one name in the directory: nothing outside it can be harmed
        with parent_of(dir_fd, target.relpath) as (parent, name):
            size = os.stat(name, dir_fd=parent, follow_symlinks=False).st_size
            os.unlink(name, dir_fd=parent)
        return f"deleted {target.relpath} ({size} bytes)"
    try:
        fd = open_beneath(dir_fd, target.relpath, os.O_RDWR | os.O_NONBLOCK)
    except OSError as exc:
        raise Refused(f"the newest checkpoint {target.relpath} cannot be opened inside the checkpoint directory "
                      f"{directory} without following a link ({exc.strerror}); the fault did not happen") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"the newest checkpoint {target.relpath} is not a regular file; the fault did not happen")
        if st.st_nlink > 1 and (inside := _links_inside(dir_fd, st)) < st.st_nlink:
            raise Refused(f"the newest checkpoint {target.relpath} has {st.st_nlink} hard links and only {inside} of "
                          f"them are in the checkpoint directory {directory}: damaging it would damage a file "
                          "outside, so the fault did not happen")
        size = st.st_size
        if mode == "truncate":
            os.ftruncate(fd, size // 2)
            return f"truncated {target.relpath} from {size} to {size // 2} bytes"
        chunk = os.pread(fd, 16, size // 2)
        os.pwrite(fd, bytes(b ^ 0xFF for b in chunk), size // 2)
        os.fsync(fd)
        return f"flipped {len(chunk)} bytes at offset {size // 2} of {target.relpath} ({size} bytes)"
    finally:
        os.close(fd)


class CorruptCheckpointOptions(FaultSpec):
    TARGET: ClassVar = "none"
    kind: Literal["corrupt_checkpoint"]
    mode: Literal["truncate", "flip", "delete"] = Field(
        "flip", description="how the newest checkpoint is damaged: flip 16 bytes in the middle (loads silently), "
        "truncate it to half, or delete it")

    @classmethod
    def target_hint(cls) -> str:
        return "corrupt_checkpoint acts on the checkpoint storage"


class CorruptCheckpoint(FaultKind):
    kind = "corrupt_checkpoint"
    options = CorruptCheckpointOptions
    summary = "the newest checkpoint file is damaged (flip, truncate or delete); shows at the next restart"
    needs = frozenset({CHECKPOINT_STORAGE})
    disruptive = False
    targets_node = False
    colour = "#9467bd"

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        return {"mode": draw(st.sampled_from(["flip", "truncate", "delete"]))}

    def inject(self, ctx: FaultContext) -> str:
        directory = ctx.checkpoint_dir
        if directory is None or not directory.is_dir():
            raise RuntimeError("no checkpoint directory to corrupt (set workload.checkpoint_dir)")
        try:  # resolved when the run was planned: a link swapped in on the way since is refused
            dir_fd = open_path(str(directory))
        except OSError as exc:
            raise Refused(f"the checkpoint directory {directory} cannot be opened without following a link "
                          f"({exc.strerror}); the fault did not happen") from None
        try:
            newest = newest_checkpoint(dir_fd)
            if newest is None:
                raise RuntimeError(f"no checkpoint in {directory} yet")
            ctx.details.update(path=str(directory / newest.name), step=newest.step, mode=ctx.spec.mode)
            if stat.S_ISLNK(os.stat(newest.name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                newest = through_link(dir_fd, directory, newest)
                ctx.details.update(path=str(directory / newest.relpath), through_link=newest.name)
            return damage(dir_fd, directory, newest, ctx.spec.mode)
        finally:
            os.close(dir_fd)
