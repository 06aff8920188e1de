"""report.html drawn by a process that imported matplotlib while the job ran.

Every ``chaos run`` ends with report.html, and drawing it starts with importing matplotlib: ~0.6 s here, ~0.9 s
with the first figure, paid after the last node exited, so a 16 s job's command took ~1 s longer for its report
alone (issue 36). The engine now starts this renderer once the nodes are launched, at the lowest priority
(``nice 19``: it imports in the cores' idle moments, not in the job's time). Starting it at the job's first step
instead (after every process's torch import) measured no different: command 1.001x, job 0.992x, n=8 pairs. At
the end the engine gives it back the engine's priority (where it may: lowering a nice value needs CAP_SYS_NICE)
and sends it the run directory;
the renderer analyses that directory on its own (on the other core, while the engine analyses it for
result.json: a report is recomputable from a run directory alone) and writes report.html. It reads the run's
history while the job runs (told the run directory at the launch, ``watch``), so that at the end it parses only
the lines written since its last read.

It leaves nothing behind: it ends at the end of its input, dies with the engine once it is ready
(``PR_SET_PDEATHSIG``), is out of the terminal's reach (Ctrl-C is the engine's to handle), and
:meth:`Renderer.close` reaps it. When it cannot help (it
failed to start or to import, it died, it answered an error) the engine draws the report itself, as before.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LOWEST = 19  # the renderer's nice value while the job runs
SWITCH_ENV = "TORCH_CHAOS_REPORT_RENDERER"  # "off": the engine draws report.html itself
# A report of a long soak takes seconds to draw on a loaded machine; past this the run ends without one (`chaos
# report DIR --format html` draws it then).
RENDER_TIMEOUT_S = 120.0


class RenderFailed(Exception):
    """The renderer could not draw this report (why: its own words, or how it ended)."""


class Renderer:
    """One renderer process for one run: ``start()`` and ``watch(run_dir)`` after the launch, ``ask(run_dir)``
    then ``answer()`` at the end, ``close()`` always."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # its stderr; closed by close()
        self._pending = b""  # what was read of the renderer's output past its last whole line

    @staticmethod
    def saves_time() -> bool:
        """Whether a renderer would save this process time: not where matplotlib is imported already (the pytest
        plug-in, `chaos compare`, a second run in one process), whose drawing costs no import; not where
        ``$TORCH_CHAOS_REPORT_RENDERER`` is ``off`` (a machine that wants no second process per run; the
        benchmark that measures what the renderer saves, ``benchmarks/observer_overhead.py --renderer``)."""
        return "matplotlib" not in sys.modules and os.environ.get(SWITCH_ENV, "on") != "off"

    def start(self) -> None:
        # A session of its own: with autogroups (most distributions' kernels) CPU is shared between sessions
        # first, and each node is a session, so a nice 19 process in the engine's session would still get a
        # node's share; alone in its session, the session's nice makes it yield (measured: the job 1.06x slower
        # with only the process niced, issue 36).
        self._proc = subprocess.Popen([sys.executable, "-m", "chaos.reports.render_server"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, close_fds=True, bufsize=0,
                                      start_new_session=True)
        set_priority(self._proc.pid, LOWEST, LOWEST)  # raising a nice value needs no privilege

    def watch(self, run_dir: Path) -> None:
        """Name the run it will be asked for: it reads that run's history while the job runs (in its idle
        moments, at nice 19), so that its analysis at the end parses only the last lines. Best effort: a renderer
        that cannot take it now fails at ``ask``."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(json.dumps({"watch": str(run_dir)}).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass

    def ask(self, run_dir: Path) -> None:
        """Ask for ``run_dir``'s report.html (``answer()`` waits for it); raises RenderFailed when the renderer
        cannot take it (the caller draws the report)."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise RenderFailed("not started")
        # the engine's priority for the rest of its import and the drawing (lowering needs CAP_SYS_NICE: else 19)
        set_priority(proc.pid, os.getpriority(os.PRIO_PROCESS, 0), autogroup_nice(os.getpid()))
        try:
            proc.stdin.write(json.dumps({"run_dir": str(run_dir)}).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            raise RenderFailed(f"it is gone ({self._ended(proc)}): {exc}") from exc

    def answer(self, timeout_s: float = RENDER_TIMEOUT_S) -> Path:
        """The path of the report asked for; raises RenderFailed when the renderer could not draw it."""
        proc = self._proc
        if proc is None:
            raise RenderFailed("not started")
        deadline = time.monotonic() + timeout_s
        while True:  # a "ready" line first, unless it was read already; then the answer
            try:
                answer = json.loads(self._line(proc, deadline, timeout_s))
            except ValueError as exc:  # its protocol is its own stdout; anything else there is a bug of its
                raise RenderFailed(f"it answered something else than a JSON line ({exc})") from exc
            if not isinstance(answer, dict) or "ready" in answer:
                continue
            if "error" in answer or "path" not in answer:
                raise RenderFailed(str(answer.get("error", answer)))
            return Path(answer["path"])

    def _line(self, proc: subprocess.Popen[bytes], deadline: float, timeout_s: float) -> bytes:
        """The renderer's next line, read unbuffered (a buffered read could swallow the answer behind the
        "ready" line and leave select() waiting for bytes already read)."""
        assert proc.stdout is not None
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                raise RenderFailed(f"no answer within {timeout_s:g} s")
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise RenderFailed(f"it ended ({self._ended(proc)})")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def close(self) -> None:
        """End the renderer (its input closed, then killed if it lingers) and reap it: on a thread of its own,
        so that the command's end does not wait for the exit of a process that has matplotlib loaded (~15 ms)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            if proc.stdout is not None:
                proc.stdout.close()
            threading.Thread(target=_reap, args=(proc,), name="torch-chaos-renderer-reap", daemon=True).start()
        self._stderr.close()

    def _ended(self, proc: subprocess.Popen[bytes]) -> str:
        code = proc.poll()
        if code is None:
            return "still running"
        self._stderr.seek(0)
        tail = self._stderr.read()[-600:].decode(errors="replace").strip()
        return f"exit code {code}" + (f": {tail}" if tail else "")


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for an ended renderer's exit (it leaves at the end of its input), killing one that lingers. A process
    that ends before this thread (the chaos command's own) leaves nothing either: the renderer dies with it
    (PR_SET_PDEATHSIG) or is already gone."""
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def autogroup_nice(pid: int) -> int | None:
    """The nice value of ``pid``'s autogroup (its session's CPU share), None without autogroups."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def set_priority(pid: int, nice: int, session_nice: int | None) -> None:
    """Set a process's nice value and its autogroup's, where allowed (raising either needs nothing; lowering
    needs CAP_SYS_NICE): a priority that cannot be set leaves the renderer slower, never the run failed."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError:
        pass
    if session_nice is not None:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(session_nice))
        except OSError:
            pass
