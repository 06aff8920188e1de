"""The report renderer's process (``python -m chaos.reports.render_server``, started by
:class:`chaos.reports.renderer.Renderer`, which sets its priority): it imports what drawing needs, says it is
ready, then draws the report of each run directory it is sent, one JSON line in and one out. A ``watch`` line
names the run it will be asked for: its history is read while the job runs."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from chaos.analysis.load import History, HistoryLoader
from chaos.analysis.run import analyze_run
from chaos.reports import write_report
from chaos.reports.html import render_html
from chaos.reports.model import build_report
from chaos.reports.plots import plt, to_svg

PR_SET_PDEATHSIG = 1
READ_EVERY_S = 1.0  # the watched history is read this often while the job runs (at nice 19)
REHEARSE_AFTER_STEPS = 1  # the report is rehearsed once the job has stepped (so the rehearsal draws its parts)


def _serve() -> None:
    """The renderer process: import what drawing needs, say ready, then draw each run directory asked for."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the engine
    except (OSError, AttributeError):
        pass  # not Linux: the end of its input still ends it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # not in the terminal's process group either: the engine decides
    # Its stdout is the engine's line protocol: whatever a library prints (Python or C) goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    _warm_up()
    # What the imports made lives until the exit: out of the cyclic collector's reach, a collection walks only what
    # a report makes, and none runs while one is drawn (a process that draws one report and ends). Measured (issue
    # 36): the two figures 0.15-0.17 s instead of 0.25-0.39 s, most of the difference the collector's full passes.
    gc.freeze()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    watched = Watched()
    for request in _requests(sys.stdin.fileno(), watched.read):
        if "watch" in request:
            watched.watch(Path(request["watch"]))
            continue
        run_dir = Path(request["run_dir"])
        gc.disable()
        try:
            events = watched.history(run_dir)
            path = write_report(analyze_run(run_dir, events), "html", out_named_by_user=False)
            answer = {"path": str(path)}
        except Exception as exc:  # the engine says it, and draws the report itself
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            gc.enable()
        out.write(json.dumps(answer) + "\n")
        out.flush()
    # Its input ended (the engine closed it, or is gone): everything it wrote is flushed, so it skips the
    # interpreter's teardown (~0.25 s with matplotlib loaded, which the engine's close() would wait for).
    os._exit(0)


def _requests(fd: int, idle: Callable[[], None]) -> Iterator[dict[str, Any]]:
    """The engine's requests, one JSON line each, until its end of input; ``idle`` is called every READ_EVERY_S
    while none comes."""
    pending = b""
    while True:
        while b"\n" not in pending:
            if not select.select([fd], [], [], READ_EVERY_S)[0]:
                idle()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            pending += chunk
        line, _, pending = pending.partition(b"\n")
        yield json.loads(line)


class Watched:
    """The history of the run the renderer will draw, read while the job runs (:class:`HistoryLoader`), so that
    the analysis after the last node exited parses only its last lines. Best effort: a history that cannot be
    read so is read whole at the end, as without it."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self._loader: HistoryLoader | None = None
        self._rehearsed = False

    def watch(self, run_dir: Path) -> None:
        if self._loader is not None:
            self._loader.close()
        self.run_dir = run_dir
        try:
            self._loader = HistoryLoader(run_dir / "events.jsonl")
        except OSError:
            self._loader = None

    def read(self) -> None:
        if self._loader is None:
            return
        try:
            self._loader.read()
        except Exception:  # best effort: the history is then read whole at the end
            self._loader.close()
            self._loader = None
            return
        if not self._rehearsed and self._loader.steps_read >= REHEARSE_AFTER_STEPS and self.run_dir is not None:
            self._rehearsed = True
            _rehearse(self.run_dir, self._loader.snapshot())

    def history(self, run_dir: Path) -> History | None:
        """The whole history of ``run_dir`` (None: not this run's, or it could not be read: read it anew)."""
        loader, self._loader = self._loader, None
        if loader is None or run_dir != self.run_dir:
            if loader is not None:
                loader.close()
            return None
        try:
            return loader.history()
        except Exception:  # best effort: read it anew, as without a watch
            loader.close()
            return None


def _rehearse(run_dir: Path, so_far: History) -> None:
    """The report of the run so far, drawn and thrown away, once, while the job runs (at nice 19): the first
    analysis and drawing of a process pay for what a throwaway figure does not reach (the scenario model's
    validators, built at its first validation; the report's own texts, tick labels and legends), ~0.2 s that the
    report after the last step paid (issue 36: its analysis 0.10 s instead of 0.02, its figures 0.25 s instead of
    0.16). Nothing is written; a history it cannot draw yet is no error (the real report is drawn at the end)."""
    gc.disable()
    try:
        render_html(build_report(analyze_run(run_dir, so_far)))
    except Exception:  # a rehearsal: the report at the end says what went wrong, if anything
        pass
    finally:
        gc.enable()


def _warm_up() -> None:
    """Draw a throwaway figure like the report's (markers drawn as an image, a log axis, a legend): the first
    drawing of a process fills matplotlib's caches (fonts, glyphs, the tick formatters' text), ~0.1 s that the
    report would otherwise pay after the job."""
    fig, (ax, lax) = plt.subplots(2, 1, figsize=(9, 3))
    ax.plot(range(50), range(50), ".", markersize=2, rasterized=True, label="warm-up")
    ax.axvspan(10, 20, alpha=0.2, hatch="//")
    ax.legend(fontsize=7)
    lax.plot(range(1, 50), [1 / x for x in range(1, 50)])
    lax.set_yscale("log")
    lax.set_xlabel("global step")
    to_svg(fig)


if __name__ == "__main__":
    _serve()
