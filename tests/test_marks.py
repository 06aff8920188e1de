"""Process marks: which engine started a process, and whether that engine is gone (``chaos cleanup``'s orphans)."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark, engine_pid, kill_marked, orphaned, parse_engine_mark


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def marked() -> Iterator[tuple[str, Callable[[str, str], psutil.Process]]]:
    """(a mark prefix of this test's own, start(name, engine mark) → a sleeping marked process); killed after."""
    prefix = f"test-marks-{secrets.token_hex(3)}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, mark: str) -> psutil.Process:
        proc = subprocess.Popen(["sleep", "60"], env={**os.environ, TREE_VAR: f"{prefix}/{name}", ENGINE_VAR: mark})
        procs.append(proc)
        found = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while found.environ().get(TREE_VAR) is None:  # until exec: the forked child still has pytest's environment
            assert time.monotonic() < deadline, "sleep did not start"
            time.sleep(0.01)
        return found

    yield prefix, start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_mark_names_this_engine_and_its_pid_namespace() -> None:
    pid, _, namespace = engine_mark().partition("@")
    assert int(pid) == os.getpid()
    assert namespace == str(os.stat("/proc/self/ns/pid").st_ino)
    assert parse_engine_mark(engine_mark()) == (os.getpid(), True)
    assert parse_engine_mark("123") == (123, True)  # a mark written before namespaces were recorded
    assert parse_engine_mark("123@1") == (123, False)
    assert parse_engine_mark("") == (None, True)
    assert parse_engine_mark("garbage@1") == (None, True)


def test_a_process_whose_engine_lives_in_another_pid_namespace_is_no_orphan_here(
        marked: tuple[str, Callable[[str, str], psutil.Process]], dead_pid: int) -> None:
    """An engine in a container (the Slurm runtime's, on the container cluster's login node) starts processes the
    host also sees; its pid means nothing here, so the host's ``chaos cleanup`` must leave them alone."""
    prefix, start = marked
    namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    foreign = start("foreign", f"{os.getpid()}@1")  # even a pid that exists here: it is another namespace's
    ours_dead = start("dead", f"{dead_pid}@{namespace}")
    legacy_dead = start("legacy", str(dead_pid))
    live = start("live", engine_mark())
    assert not orphaned(foreign) and engine_pid(foreign) is None
    assert orphaned(ours_dead) and orphaned(legacy_dead)
    assert not orphaned(live) and engine_pid(live) == os.getpid()
    killed = {p.pid for p in kill_marked(prefix, only_orphans=True)}
    assert killed == {ours_dead.pid, legacy_dead.pid}
    assert foreign.is_running() and live.is_running()
