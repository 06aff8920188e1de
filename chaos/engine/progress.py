"""Following the job's progress live: the history tail, plus (for ``command:`` workloads without the probe) the
progress lines in the node logs and the files in the checkpoint directory, turned into history events.

Only what the engine must decide live is kept here (the highest step, when progress was last seen, restarts
without progress); every reported figure is computed afterwards from the history by :mod:`chaos.analysis`.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from chaos.events import Ev, Source
from chaos.history import Event, FileTail, HistoryWriter

CHECKPOINT_SCAN_S = 0.25


class LogProgress:
    """Command workloads without the probe: each printed progress line becomes a ``step_completed`` event.

    A step number lower than the last one printed on that node means new worker processes (a restart),
    recorded as an inferred ``process_started`` so that recovery is measured as for instrumented jobs.
    """

    def __init__(self, progress_regex: str, log_paths: Mapping[str, Path], history: HistoryWriter):
        self._regex = re.compile(progress_regex)
        self._rank_group = "rank" in self._regex.groupindex
        self._tails = {name: FileTail(path) for name, path in log_paths.items()}
        self._incarnation = dict.fromkeys(log_paths, 0)
        self._last_step = dict.fromkeys(log_paths, 0)
        self._history = history

    def scrape(self) -> None:
        for name, tail in self._tails.items():
            for line in tail.read_lines():
                m = self._regex.search(line)
                if not m:
                    continue
                step = int(m.group("step"))
                rank = int(m.group("rank")) if self._rank_group and m.group("rank") is not None else None
                if rank not in (None, 0):
                    continue  # one line per step: rank 0's (every rank prints the same global step)
                inc = self._incarnation[name]
                if step <= self._last_step[name] or inc == 0:
                    inc += 1
                    self._incarnation[name] = inc
                    self._history.write(Ev.PROCESS_STARTED, source=Source.PROGRESS, node=name, pid=f"{name}:{inc}")
                self._last_step[name] = step
                loss = m.groupdict().get("loss")
                self._history.write(Ev.STEP_COMPLETED, source=Source.PROGRESS, node=name, pid=f"{name}:{inc}",
                                    step=step, loss=float(loss) if loss else None)


# torchrun's agent logs every worker that dies (at ERROR level, so it shows with default logging):
#   "... failed (exitcode: 1) local_rank: 0 (pid: 32542) of binary: /usr/bin/python"
_WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
LAST_LINES = 8


class NodeLogs:
    """The nodes' own output, read as it grows: the launcher's worker failures, and each node's last lines.

    A job that cannot start (a missing file, an import error, a bad argument) never completes a step and often
    never reaches the probe: only torchrun's log says its workers keep dying. That is what lets the end detector
    call it a failed start at once, with the lines that explain it, instead of waiting for the startup timeout.
    """

    def __init__(self, log_paths: Mapping[str, Path]):
        self._tails = {name: FileTail(path) for name, path in log_paths.items()}
        self.last_lines: dict[str, deque[str]] = {name: deque(maxlen=LAST_LINES) for name in log_paths}
        self.worker_failures: dict[str, list[int]] = {name: [] for name in log_paths}  # exit codes, in order

    def read(self) -> None:
        for name, tail in self._tails.items():
            for line in tail.read_lines():
                if line.strip():
                    self.last_lines[name].append(line.rstrip()[:300])
                m = _WORKER_FAILED.search(line)
                if m:
                    self.worker_failures[name].append(int(m.group(1)))

    def explain(self, name: str | None = None) -> str:
        """The failures per node and the last lines of the node that failed most (or of ``name``)."""
        counts = {n: codes for n, codes in self.worker_failures.items() if codes}
        parts = [f"{n}: {len(codes)} worker failure(s), exit code(s) {sorted(set(codes))}"
                 for n, codes in sorted(counts.items())]
        worst = name or max(counts, key=lambda n: len(counts[n]), default=None) or next(iter(self.last_lines), None)
        lines = list(self.last_lines.get(worst, [])) if worst else []
        text = "; ".join(parts)
        if lines:
            text += ("; " if text else "") + f"last lines of {worst}'s log:\n    " + "\n    ".join(lines)
        return text


class CheckpointWatcher:
    """Scripts without the probe: record each checkpoint file that appears or changes (for resume inference)."""

    def __init__(self, directory: Path | None, history: HistoryWriter):
        self._directory = directory
        self._history = history
        self._seen: dict[str, tuple[int, float]] = {}
        self._next_scan = 0.0

    def scan(self) -> None:
        directory = self._directory
        now = time.monotonic()
        if directory is None or now < self._next_scan or not directory.is_dir():
            return
        self._next_scan = now + CHECKPOINT_SCAN_S
        for path in sorted(directory.iterdir()):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if not path.is_file() or path.name.startswith("."):
                continue
            sig = (st.st_size, st.st_mtime)
            if self._seen.get(str(path)) != sig:
                self._seen[str(path)] = sig
                self._history.write(Ev.CHECKPOINT_SEEN, source=Source.PROGRESS, path=str(path), bytes=st.st_size,
                                    mtime=st.st_mtime)


class ProgressObserver:
    """Reads what the job appended to the history since the last tick and keeps the live progress figures.

    ``starts_since_progress`` counts rank-0 worker starts that no disruptive fault provoked and that no new
    step followed: the end detector calls a run a restart loop on it. The fault scheduler tells this observer
    about each disruptive fault it injects (:meth:`fault_injected`), so the restart that answers it is recovery.
    """

    def __init__(self, history_path: Path, log_progress: LogProgress | None, checkpoints: CheckpointWatcher | None,
                 note: Callable[[str], None], now: float, node_logs: NodeLogs | None = None):
        self._tail = FileTail(history_path)
        self._log_progress = log_progress
        self._checkpoints = checkpoints
        self.node_logs = node_logs
        self._note = note
        self._fault_since_last_start = False
        self.max_step = 0
        self.first_step_t: float | None = None
        self.last_progress_t = now
        self.rank0_starts = 0
        self.starts_since_progress = 0
        self.event_counts: dict[str, int] = {}  # events of the job (not the engine's own), by name
        # Processes the storage layer is holding in a stalled operation, by (node, pid), until they step again.
        self.blocked: dict[tuple[object, object], Event] = {}

    def blocked_text(self, now: float) -> str:
        """Who the storage layer is holding in a stalled operation (for a hung run's why), or ""."""
        parts = [f"{e.get('node')} (pid {e.get('pid')}) blocked in {e.get('op')} of "
                 f"{Path(str(e.get('path'))).name} for {now - e['t']:.0f}s by storage fault {e.get('fault_id')}"
                 for e in sorted(self.blocked.values(), key=lambda e: e["t"])]
        return "; " + "; ".join(parts) if parts else ""

    @property
    def restarts(self) -> int:
        return max(0, self.rank0_starts - 1)

    def begin(self, now: float) -> None:
        """The faulted run starts now (after the golden run): stall time counts from here."""
        self.last_progress_t = now

    def fault_injected(self) -> None:
        """A disruptive fault took effect: the next worker start answers it and is not a restart-loop sign."""
        self._fault_since_last_start = True

    def drain(self) -> list[Event]:
        """The job's new history events (after turning new log lines and checkpoint files into events)."""
        if self._log_progress is not None:
            self._log_progress.scrape()  # written to the history; observed when the tail reads it back
        if self._checkpoints is not None:
            self._checkpoints.scan()
        if self.node_logs is not None and self.first_step_t is None:
            self.node_logs.read()  # only needed until the job has started: a failed start is judged from it
        events = list(self._tail.read_new())
        for e in events:
            self._observe(e)
        return events

    def _observe(self, e: Event) -> None:
        kind = e.get("event")
        if e.get("source") == Source.ENGINE:
            return
        self.event_counts[kind] = self.event_counts.get(kind, 0) + 1
        if kind == Ev.STEP_COMPLETED:
            if self.first_step_t is None:
                self.first_step_t = e["t"]
            self.last_progress_t = max(self.last_progress_t, e["t"])
            if e["step"] > self.max_step:
                self.max_step = e["step"]
                self.starts_since_progress = 0
            self.blocked.pop((e.get("node"), e.get("pid")), None)
        elif kind == Ev.STORAGE_OP_STALLED:
            self.blocked[(e.get("node"), e.get("pid"))] = e
        elif kind == Ev.PROCESS_STARTED and e.get("rank", 0) == 0:
            self.rank0_starts += 1
            if self.rank0_starts > 1:
                # A restart that answers one of our faults is recovery; only unprovoked ones make a loop.
                if not self._fault_since_last_start:
                    self.starts_since_progress += 1
                self._note(f"workers restarted on {e.get('node')} (restart {self.rank0_starts - 1})")
            self._fault_since_last_start = False
            self.last_progress_t = max(self.last_progress_t, e["t"])
