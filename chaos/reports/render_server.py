"""The report renderer's process (``python -m chaos.reports.render_server``, started by
:class:`chaos.reports.renderer.Renderer`, which sets its priority): it imports what drawing needs, says it is
ready, then draws the report of each run directory it is sent, one JSON line in and one out."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

from chaos.reports import write_report
from chaos.reports.html import render_html  # noqa: F401 (what this process is for: matplotlib, the figures)
from chaos.reports.model import build_report  # noqa: F401 (the analysis)
from chaos.reports.plots import plt, to_svg

PR_SET_PDEATHSIG = 1


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
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            path = write_report(Path(request["run_dir"]), "html", out_named_by_user=False)
            answer = {"path": str(path)}
        except Exception as exc:  # the engine says it, and draws the report itself
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    # Its input ended (the engine closed it, or is gone): everything it wrote is flushed, so it skips the
    # interpreter's teardown (~0.25 s with matplotlib loaded, which the engine's close() would wait for).
    os._exit(0)


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
