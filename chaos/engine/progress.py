"""Following the job's progress live: the history tail, plus (for ``command:`` workloads without the probe) the
progress lines in the node logs and the files in the checkpoint directory, turned into history events.

Only what the engine must decide live is kept here (the highest step, when progress was last seen, restarts
without progress); every reported figure is computed afterwards from the history by :mod:`chaos.analysis`.
"""

from __future__ import annotations

import re
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from chaos.analysis.progress_lines import line_shape
from chaos.events import NODE_BANNER, Ev, Source
from chaos.history import Event, FileTail, HistoryWriter
from chaos.progress_regex import LINE_TIMEOUT_S, Budget, ProgressRegexTooSlow, compile_progress, search

CHECKPOINT_SCAN_S = 0.25
# How long one tick may spend matching progress lines, and how many lines may wait for a later tick (a job printing
# faster than its pattern matches) before the run is ended as an error: the tick must stay short, and memory bounded.
SCRAPE_BUDGET_S = 0.5
MAX_BACKLOG = 200_000
FINAL_SCRAPE_S = 1.0  # the last lines' matching at teardown, where stop signals are ignored
# A progress line repeating a step the current round printed this recently is another rank's copy of it (every rank
# printing, no ``rank`` group in the regex), not a restart: a restarted round takes longer than this to print (a new
# process imports torch and joins a rendezvous), and torchrun's failure lines mark it anyway.
DUPLICATE_WINDOW_S = 3.0


# A line shape printed this often while progress_regex matched nothing is probably the progress the pattern misses
MISSED_AFTER = 20
MAX_SHAPES = 1000  # distinct unmatched shapes counted (a job printing unique lines cannot grow the counter)


class LogProgress:
    """Command workloads without the probe: each printed progress line becomes a ``step_completed`` event.

    Each new worker round is recorded as an inferred ``process_started`` (pid ``<node>:<n>``), so that recovery,
    restarts and restart loops are measured as for instrumented jobs. A round shows as: a printed step number
    lower than (or equal to) the last one printed on that node; a new worker pid reading a checkpoint through the
    storage layer after the current round printed (a job that resumes exactly at the next step prints no lower
    number); or torchrun's agent reporting dead workers. A round that dies before printing anything (a crash loop
    on a damaged checkpoint) is recorded when the next failure proves it ran (it loaded, or the same node failed
    again), so such a loop counts its restarts instead of looking like a hang.
    """

    def __init__(self, progress_regex: str, log_paths: Mapping[str, Path], history: HistoryWriter,
                 clock: Callable[[], float] = time.monotonic):
        self.pattern = progress_regex
        self._regex = compile_progress(progress_regex)
        # Lines read but not matched yet, oldest first: each scrape matches for at most SCRAPE_BUDGET_S, so that
        # the engine's tick (its deadline, its faults, a stop) never waits on a slow pattern or a flood of lines.
        self._backlog: deque[tuple[str, int, str]] = deque()
        self.too_slow: ProgressRegexTooSlow | None = None  # set once matching failed: the logs are not read again
        self._clock = clock
        # steps the current round printed (when): the same step printed again soon after, by another rank (in
        # another node's log, or another local rank in this one), is that rank's copy of the line, not a new round
        self._round_printed: dict[int, tuple[float, int]] = {}  # step -> (when, line number)
        self._last_print_t = -float("inf")
        self._last_line = 0  # the line number of the last step written
        self._line = 0  # progress lines and start banners read, numbered
        self._node_started: dict[str, int] = {}  # node -> the line number of its log's last start banner
        self.duplicate_lines = 0  # progress lines dropped as other ranks' copies (no ``rank`` group to tell)
        self.duplicate_nodes: set[str] = set()  # the logs whose lines were other ranks' copies of the printer's
        self._rank_group = "rank" in self._regex.groupindex
        self._tails = {name: FileTail(path) for name, path in log_paths.items()}
        self._incarnation = dict.fromkeys(log_paths, 0)
        self._last_step = dict.fromkeys(log_paths, 0)
        self._history = history
        self._printer: str | None = None  # the node whose log printed the last step (rank 0's)
        self._progressed = False  # the current round printed a step
        self._pending = False  # a new round began (evidence seen); its start is written when it shows
        self._failed: set[str] = set()  # nodes whose workers died since the pending round began
        self._loaded_in_pending = False  # a new worker pid read a checkpoint since the pending round began
        self._storage_pids: set[tuple[object, object]] = set()  # processes the storage layer saw save or load
        # Until the pattern first matches: the shapes of the lines it did not match (numbers collapsed), so that a
        # wrong pattern is told within seconds of the job printing its progress, not after the whole run
        self.matched_any = False
        self.unmatched_lines = 0
        self._unmatched_shapes: Counter[str] = Counter()
        self._shape_sample: dict[str, str] = {}

    def scrape(self, node_logs: NodeLogs | None = None, budget_s: float = SCRAPE_BUDGET_S,
               final: bool = False) -> None:
        """Read the new log lines; ``node_logs`` gets every line too (the failures and last lines it keeps).

        Matches for about ``budget_s`` (plus at most one line's LINE_TIMEOUT_S); lines left over wait in order for
        the next call. Raises :class:`ProgressRegexTooSlow` when one line takes longer than LINE_TIMEOUT_S, or when
        more than MAX_BACKLOG lines wait (the pattern cannot keep up with the job); the logs are not read again.
        ``final``: the run is over and being torn down, with stop signals ignored, so nothing may take longer than
        ``budget_s`` in all: a line that would is left unread, and nothing is raised."""
        if self.too_slow is not None:
            return
        for name, tail in self._tails.items():
            self._backlog.extend((name, number, line) for number, line in tail.read_numbered_lines())
        budget = Budget(budget_s)
        while self._backlog and not budget.spent():
            name, number, line = self._backlog.popleft()
            if node_logs is not None and node_logs.feed(name, line):
                self.worker_failed(name)
                continue
            if line.startswith(NODE_BANNER):  # the runtime (re)started this node: what follows is new
                self._line += 1
                self._node_started[name] = self._line
                continue
            try:
                m = search(self._regex, line, min(LINE_TIMEOUT_S, budget.remaining()) if final else LINE_TIMEOUT_S)
            except TimeoutError:
                if final:
                    return
                self.too_slow = ProgressRegexTooSlow.on_line(self.pattern, number, self._tails[name].path,
                                                             len(line), LINE_TIMEOUT_S)
                self._backlog.clear()
                raise self.too_slow from None
            if m:
                self.matched_any = True
                self._printed(name, m)
            elif not self.matched_any:
                self._unmatched(line)
        if not final and len(self._backlog) > MAX_BACKLOG:
            name, number, _ = self._backlog[0]
            self.too_slow = ProgressRegexTooSlow(
                f"workload.progress_regex cannot keep up with the job's output: {len(self._backlog)} lines wait to "
                f"be matched, from line {number} of {self._tails[name].path} on (the pattern '{self.pattern}' "
                "takes too long per line); simplify it, e.g. 'step (?P<step>\\d+)'")
            self._backlog.clear()
            raise self.too_slow

    def _unmatched(self, line: str) -> None:
        self.unmatched_lines += 1
        shape = line_shape(line)
        if shape is not None and len(self._unmatched_shapes) < MAX_SHAPES:
            self._unmatched_shapes[shape] += 1
            self._shape_sample.setdefault(shape, line.strip()[:200])

    def looks_missed(self) -> tuple[int, str] | None:
        """While the pattern has matched nothing: (count, sample) of a line shape the job printed at least
        MISSED_AFTER times, as a progress line is; None otherwise. Only a hint (a job may print a repeated line
        before its first step, like a download's progress), so the engine says it and goes on."""
        if self.matched_any or not self._unmatched_shapes:
            return None
        shape, count = self._unmatched_shapes.most_common(1)[0]
        return (count, self._shape_sample[shape]) if count >= MISSED_AFTER else None

    def _printed(self, name: str, m: Any) -> None:
        step = int(m.group("step"))
        rank = int(m.group("rank")) if self._rank_group and m.group("rank") is not None else None
        if rank not in (None, 0):
            return  # one line per step: rank 0's (every rank prints the same global step)
        now = self._clock()
        self._line += 1
        if not self._pending and self._copy_of_printed(name, step, now):
            self.duplicate_lines += 1
            if name != self._printer:
                self.duplicate_nodes.add(name)
            self._last_step[name] = step
            return
        if self._pending or step <= self._last_step[name] or self._incarnation[name] == 0:
            self._start(name)
            self._pending = False
            self._round_printed = {}
        self._printer, self._progressed = name, True
        self._last_step[name] = step
        self._round_printed[step] = (now, self._line)
        self._last_print_t, self._last_line = now, self._line
        if len(self._round_printed) > 4096:  # only the last few seconds' steps can be copied
            self._round_printed = {k: v for k, v in self._round_printed.items() if now - v[0] <= DUPLICATE_WINDOW_S}
        loss = m.groupdict().get("loss")
        self._history.write(Ev.STEP_COMPLETED, source=Source.PROGRESS, node=name,
                            pid=f"{name}:{self._incarnation[name]}", step=step, loss=float(loss) if loss else None)

    def _copy_of_printed(self, name: str, step: int, now: float) -> bool:
        """Whether a line is another rank's copy of the current round's progress (a regex without a ``rank``
        group matches every rank's line): a step this round printed less than DUPLICATE_WINDOW_S ago, or, once
        another node's log was seen copying the printer's, a step ahead of it from that node while the printer is
        printing (the printer prints it in a moment; synchronous ranks never run apart without a restart)."""
        printed = self._round_printed.get(step)
        if printed is not None and now - printed[0] <= DUPLICATE_WINDOW_S and printed[1] > self._node_started.get(
                name, 0):  # (a node the runtime restarted since prints a new round's lines)
            # Another node's log: its rank's copy. The printer's own log (other local ranks): only a repeat of
            # the latest step, as synchronous ranks print (a lower step is a restart, as without copies).
            return name != self._printer or step == self._last_step[name]
        return (name != self._printer and name in self.duplicate_nodes and self._printer is not None
                and step > self._last_step[self._printer]
                and now - self._last_print_t <= DUPLICATE_WINDOW_S
                and self._node_started.get(name, 0) < self._last_line)

    def _start(self, name: str) -> None:
        self._incarnation[name] += 1
        self._history.write(Ev.PROCESS_STARTED, source=Source.PROGRESS, node=name,
                            pid=f"{name}:{self._incarnation[name]}")

    def _begin_round(self) -> None:
        self._pending, self._progressed, self._failed, self._loaded_in_pending = True, False, set(), False

    def worker_failed(self, name: str) -> None:
        """torchrun's agent on ``name`` reported dead workers: the round ended (the agent starts the next)."""
        if self._printer is None:
            return  # before the first step: a failed start, judged by the end detector from the node logs
        if self._pending and (name in self._failed or self._loaded_in_pending):
            self._start(self._printer)  # the pending round ran (it loaded, or this node failed again) and died
            self._begin_round()
        elif not self._pending:
            self._begin_round()
        self._failed.add(name)

    def observe(self, e: Event) -> None:
        """A history line: the storage layer's loads by new worker pids are evidence of a new round."""
        if e.get("source") != Source.STORAGE or e.get("event") not in (
                Ev.CHECKPOINT_LOADED, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED):
            return
        key = (e.get("node"), e.get("pid"))
        if key in self._storage_pids:
            return
        self._storage_pids.add(key)
        if e.get("event") != Ev.CHECKPOINT_LOADED or self._printer is None:
            return
        if self._pending:
            self._loaded_in_pending = True
        elif self._progressed:  # a new process reads a checkpoint after this round printed: workers restarted
            self._begin_round()
            self._loaded_in_pending = True


# torchrun's agent logs every worker that dies (at ERROR level, so it shows with default logging):
#   "... failed (exitcode: 1) local_rank: 0 (pid: 32542) of binary: /usr/bin/python"
_WORKER_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# The exception a worker died of: the last line of a Python traceback ("RuntimeError: ...").
_ERROR_LINE = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)")
LAST_LINES = 8


class NodeLogs:
    """The nodes' own output, read as it grows: the launcher's worker failures, each node's last lines and the
    last exception a worker printed.

    A job that cannot start (a missing file, an import error, a bad argument) never completes a step and often
    never reaches the probe: only torchrun's log says its workers keep dying. That is what lets the end detector
    call it a failed start at once, with the lines that explain it, instead of waiting for the startup timeout.
    For a ``command:`` workload the lines come from :class:`LogProgress` (one read of each log, in order) for the
    whole run, so a crash loop after the first step is seen too; otherwise they are read until the first step.
    """

    def __init__(self, log_paths: Mapping[str, Path]):
        self._tails = {name: FileTail(path) for name, path in log_paths.items()}
        self.last_lines: dict[str, deque[str]] = {name: deque(maxlen=LAST_LINES) for name in log_paths}
        self.worker_failures: dict[str, list[int]] = {name: [] for name in log_paths}  # exit codes, in order
        self.last_error: dict[str, str] = {}  # node -> the last exception line a worker printed

    def read(self) -> None:
        for name, tail in self._tails.items():
            for line in tail.read_lines():
                self.feed(name, line)

    def feed(self, name: str, line: str) -> bool:
        """Take one line of ``name``'s log; True when it reports dead workers."""
        if not line.strip():
            return False
        self.last_lines[name].append(line.rstrip()[:300])
        if ("Error" in line or "Exception" in line) and (err := _ERROR_LINE.match(line)):
            self.last_error[name] = err.group(1).strip()[:300]
        if "exitcode" not in line:
            return False
        m = _WORKER_FAILED.search(line)
        if m:
            self.worker_failures.setdefault(name, []).append(int(m.group(1)))
        return m is not None

    def error(self) -> str | None:
        """The exception the workers last died of (of the node that failed most), if one was printed."""
        counts = {n: len(codes) for n, codes in self.worker_failures.items()}
        name = max(self.last_error, key=lambda n: counts.get(n, 0), default=None)
        if name is None:
            return None
        text = self.last_error[name]
        end = text.find(". ", text.find(":") + 1)  # the exception and its first sentence, not the advice after it
        return f"{name}: {text[:end + 1] if end > 0 else text[:200]}"

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
                 note: Callable[[str], None], now: float, node_logs: NodeLogs | None = None,
                 warn: Callable[[str], None] | None = None):
        self._tail = FileTail(history_path, keep_open=True)  # the engine's own file: opened once (close())
        self._log_progress = log_progress
        self._checkpoints = checkpoints
        self.node_logs = node_logs
        self._note = note
        self._warn = warn or note  # hints the user must see even from a golden run (the console shows them)
        self._fault_since_last_start = False
        self._copies_noted = False
        self._missed_noted = False
        self.max_step = 0
        self.first_step_t: float | None = None
        self.last_step_t: float | None = None  # the newest step's time (the live view's recovery timer)
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

    def close(self) -> None:
        """Let go of the history's descriptor (a later drain opens it again)."""
        self._tail.close()

    def drain(self, final: bool = False) -> list[Event]:
        """The job's new history events (after turning new log lines and checkpoint files into events).

        ``final``: the last drain, at teardown: the logs' last lines are matched for at most FINAL_SCRAPE_S."""
        events = list(self._tail.read_new())
        if self._log_progress is not None:
            for e in events:  # the storage layer's loads tell it of new worker rounds before their first print
                self._log_progress.observe(e)
            # written to the history; read back just below
            if final:
                self._log_progress.scrape(self.node_logs, FINAL_SCRAPE_S, final=True)
            else:
                self._log_progress.scrape(self.node_logs)
            self._say_if_the_pattern_misses()
            copies = self._log_progress.duplicate_nodes
            if copies and not self._copies_noted:
                self._copies_noted = True
                self._warn(f"progress lines come from several ranks ({', '.join(sorted(copies))} print the steps "
                           "the first log prints): each step is counted once, from the first log that prints it; "
                           "add a (?P<rank>...) group to workload.progress_regex to follow rank 0's lines only")
            more = list(self._tail.read_new())
            for e in more:
                self._log_progress.observe(e)
            events += more
        elif self.node_logs is not None and self.first_step_t is None:
            self.node_logs.read()  # only needed until the job has started: a failed start is judged from it
        if self._checkpoints is not None:
            self._checkpoints.scan()
        for e in events:
            self._observe(e)
        return events

    def _say_if_the_pattern_misses(self) -> None:
        """Once: the job prints lines that look like progress and ``progress_regex`` matches none of them."""
        assert self._log_progress is not None
        missed = None if self._missed_noted else self._log_progress.looks_missed()
        if missed is None:
            return
        self._missed_noted = True
        count, sample = missed
        self._warn(f"workload.progress_regex '{self._log_progress.pattern}' has matched none of the "
                   f"{self._log_progress.unmatched_lines} lines the job printed so far, and {count} of them look "
                   f"alike, as progress lines do: {sample!r}. If that is the job's progress, stop the run (Ctrl-C) "
                   "and fix the pattern; no step is recorded until it matches")

    def _observe(self, e: Event) -> None:
        kind = e.get("event")
        if e.get("source") == Source.ENGINE:
            return
        self.event_counts[kind] = self.event_counts.get(kind, 0) + 1
        if kind == Ev.STEP_COMPLETED:
            if self.first_step_t is None:
                self.first_step_t = e["t"]
            self.last_step_t = max(self.last_step_t or e["t"], e["t"])
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
