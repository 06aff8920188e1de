"""How torch-chaos marks every process it starts, so it can find, judge and remove them later.

Each process tree carries ``CHAOS_TREE=<run>/<node>`` (helpers: ``<run>/delayers/<fault>``) and the engine's pid
in ``CHAOS_ENGINE_PID``, inherited by everything it spawns: a tree is found without cgroups, and a tree whose
engine is gone is an orphan that only ``chaos cleanup`` will remove. Shared by runtimes, faults that start host
helpers, and cleanup, so none of them imports another's module.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

TREE_VAR = "CHAOS_TREE"
DELAYERS = "delayers"  # marks of host-side helper processes: <run>/delayers/<fault>
ENGINE_VAR = "CHAOS_ENGINE_PID"  # which engine started the tree: tells orphans (engine gone) from live runs


def marked_processes(prefix: str | None) -> list[psutil.Process]:
    """Processes whose CHAOS_TREE equals ``prefix`` or starts with ``prefix/`` (any mark when None)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            value = proc.environ().get(TREE_VAR)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if value is not None and (prefix is None or value == prefix or value.startswith(prefix + "/")):
            found.append(proc)
    return found


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def engine_mark() -> str:
    """The ``ENGINE_VAR`` value this engine gives the processes it starts: ``<pid>@<pid namespace inode>``.

    A pid alone names a process only in its own pid namespace. An engine in a container (the Slurm runtime's, on the
    container cluster's login node) starts processes the host also sees; judged by the pid alone they look orphaned
    from the host, and ``chaos cleanup`` there would kill a live run. The namespace says whose pid it is."""
    namespace = _pid_namespace()
    return f"{os.getpid()}@{namespace}" if namespace else str(os.getpid())


def parse_engine_mark(value: str) -> tuple[int | None, bool]:
    """(the engine's pid, whether that pid is of this pid namespace) from an ``ENGINE_VAR`` value; an unmarked or
    malformed value is (None, True): nobody can claim it, as before namespaces were recorded."""
    pid, _, namespace = value.partition("@")
    if not pid.isdigit():
        return None, True
    return int(pid), not namespace or namespace == _pid_namespace()


def engine_pid(proc: psutil.Process) -> int | None:
    """The pid of the engine that started ``proc``, when that engine is of this pid namespace (else None)."""
    try:
        value = proc.environ().get(ENGINE_VAR, "")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None
    pid, here = parse_engine_mark(value)
    return pid if here else None


def signal_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def with_local_rank(procs: list[psutil.Process], local_rank: int | None) -> list[psutil.Process]:
    """The worker processes among ``procs`` whose ``LOCAL_RANK`` is ``local_rank`` (all of them for None)."""
    if local_rank is None:
        return procs
    chosen = []
    for proc in procs:
        try:
            if proc.environ().get("LOCAL_RANK") == str(local_rank):
                chosen.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return chosen


def orphaned(proc: psutil.Process) -> bool:
    """A marked process whose engine is gone: nobody will ever tear it down but ``chaos cleanup``. A process whose
    engine is of another pid namespace is not judged here: its engine's namespace (or its scheduler) tears it down."""
    try:
        value = proc.environ().get(ENGINE_VAR, "")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False  # gone, or not ours to read
    pid, here = parse_engine_mark(value)
    if not here:
        return False
    return pid is None or not psutil.pid_exists(pid)


def kill_marked(prefix: str | None, only_orphans: bool = False) -> list[psutil.Process]:
    """SIGKILL every marked process (of one run, or of all runs), stopped ones included; returns them."""
    killed: dict[int, psutil.Process] = {}
    for _ in range(10):
        procs = [p for p in marked_processes(prefix) if not only_orphans or orphaned(p)]
        if not procs:
            break
        signal_all(procs, signal.SIGKILL)
        signal_all(procs, signal.SIGCONT)
        killed.update((p.pid, p) for p in procs)
        psutil.wait_procs(procs, timeout=2)
    return list(killed.values())


def leftover_owner_files(owners_dir: Path, run_id: str | None,
                         only_orphans: bool) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(owner file, its record) for each change a fault wrote down before making it (``run_id``, ``engine_pid``
    and what to undo), of ``run_id`` (any run when None), and only those whose engine is gone when
    ``only_orphans``: what ``chaos cleanup`` must undo. Unreadable files are skipped."""
    if not owners_dir.is_dir():
        return
    for owner in sorted(owners_dir.glob("*.json")):
        try:
            info = json.loads(owner.read_text())
        except (OSError, ValueError):
            continue
        if run_id is not None and info.get("run_id") != run_id:
            continue
        if only_orphans and psutil.pid_exists(int(info.get("engine_pid", -1))):
            continue
        yield owner, info
