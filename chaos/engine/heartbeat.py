"""The engine's sign of life for the probe: a file whose modification time it refreshes twice a second.

A job held at an event (``CHAOS_PAUSE_ON`` / ``CHAOS_PAUSE_AT_STEPS``) waits for the engine's acknowledgement.
If the engine is killed (SIGKILL, OOM, a lost login node), nobody will ever acknowledge: the probe sees this file
go stale and lets the job go on within seconds instead of sitting out its safety timeout at every hold. The file
sits beside the acknowledgements, so it reaches every runtime that sees the history (containers mount it). A
thread of its own keeps it fresh while the main loop is busy injecting a slow fault, so a held job is never
released early by a live engine. The probe's side is :func:`chaos.probe.wait_for_ack`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

HEARTBEAT_FILE = "engine.alive"  # in <history>.acks/; the probe names the same file
INTERVAL_S = 0.5


class Heartbeat:
    def __init__(self, acks_dir: Path):
        self.path = acks_dir / HEARTBEAT_FILE
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="torch-chaos-heartbeat", daemon=True)

    def start(self) -> None:
        self.path.touch()
        self._thread.start()

    def stop(self) -> None:
        """The run is over: the file is removed, so a job still running is not held by anything any more."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _beat(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)
