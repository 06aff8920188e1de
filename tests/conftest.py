"""Shared fixtures: every test that starts processes must leave none behind."""
from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

from chaos.runtimes.local import engine_pid, marked_processes, orphaned

pytest_plugins = ["pytester"]


def _ours_or_orphaned(proc: psutil.Process) -> bool:
    """Started by this test process's engine, or by an engine that is gone (a leak); not another live run."""
    return engine_pid(proc) == os.getpid() or orphaned(proc)


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = {p.pid for p in marked_processes(None)}
    yield
    left = [p for p in marked_processes(None) if p.pid not in before and _ours_or_orphaned(p)]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
