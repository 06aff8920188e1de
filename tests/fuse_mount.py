"""A real FUSE storage layer in a test's directory: ``base/ckpt`` served by a forked ``chaos.storage.server``
process, unmounted after (tests/test_storage_server.py, tests/test_storage_security.py)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chaos.storage.mounts import is_mounted, unmount


@contextmanager
def served(base: Path, serve: Callable[..., None], *args: Any) -> Iterator[Path]:
    """``base/ckpt`` (kept if it is there: a test may plant files first) served by ``serve(mount, events, control,
    *args)`` in a forked process; the mount is gone when the block ends."""
    mount, control = base / "ckpt", base / ".storage"
    mount.mkdir(exist_ok=True)
    control.mkdir(exist_ok=True)
    (base / "events.jsonl").touch()
    (base / "events.jsonl.acks").mkdir(exist_ok=True)
    proc = multiprocessing.get_context("fork").Process(
        target=serve, args=(str(mount), str(base / "events.jsonl"), str(control), *args))
    proc.start()
    try:
        deadline = time.monotonic() + 10
        while not is_mounted(str(mount)):
            assert proc.is_alive() and time.monotonic() < deadline, "the server did not mount"
            time.sleep(0.02)
        yield mount
    finally:
        unmount(str(mount))
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            unmount(str(mount))
    assert not is_mounted(str(mount))
