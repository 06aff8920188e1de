"""Signals during a run: SIGTERM/SIGINT/SIGHUP stop the run (still healed, torn down and written), and are
ignored while tearing down so that a second Ctrl-C cannot leave faults or processes behind."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from chaos.run_result import RunResult

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(BaseException):
    """SIGTERM/SIGINT reached the engine: stop, heal, tear down, and still write the result.

    A BaseException, like KeyboardInterrupt: the signal lands wherever the main thread is, and code there that
    tolerates ordinary errors (a slow Docker API call, a failed fault) must not swallow it."""


class RunInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Engine.run` after an interrupted run was torn down and its result written.

    A KeyboardInterrupt, so whatever called the engine (pytest, ``chaos explore``, ``chaos compare``) stops as
    the user asked instead of carrying on with its next run; ``result`` still holds the run's result.
    """

    def __init__(self, result: RunResult):
        super().__init__(result["why"])
        self.result = result


def threading_main() -> bool:
    """Signal handlers can only be installed from the main thread (an engine in a worker thread gets none)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, a stop signal raises :class:`Interrupted` wherever the main thread is."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    if not threading_main():
        yield
        return
    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Within the block, stop signals are ignored (teardown must run to its end)."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS} if threading_main() else {}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
