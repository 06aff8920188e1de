"""The machine lock the benchmarks hold around each side-by-side pair (the same file the test suite's real
clusters take with TORCH_CHAOS_MACHINE_LOCK), so a pair is never timed beside another session's cluster."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator


@contextlib.contextmanager
def machine_lock(path: str | None) -> Iterator[None]:
    """Hold the machine lock (flock) for one pair, where there is one."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
