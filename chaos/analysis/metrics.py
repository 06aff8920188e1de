"""Metrics computed from a history alone (definitions: docs/design.md, "Metric definitions").

Everything here is a pure function of the event list, so each metric can be tested on hand-built histories
and recomputed by ``chaos report`` long after the run. Times are host-clock seconds (``t`` of the events).
"""

from __future__ import annotations

import statistics
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate, compress, islice, repeat
from operator import eq, lt, sub
from typing import Any

from chaos.analysis.ckpt_source import checkpoint_events, checkpoint_source, run_environment
from chaos.analysis.load import History, memo, of_kind, step_table
from chaos.analysis.rounds import intended_step, resume_load, rounds
from chaos.analysis.steps import StepTable, time_order
from chaos.events import Ev, Source
from chaos.history import Event


@dataclass
class FaultMetrics:
    id: int
    kind: str
    target: str
    disruptive: bool  # from fault_injected; a history without the field counts the fault as disruptive
    mechanism: str | None
    t_injected: float
    t_healed: float | None
    highest_step_before: int | None
    restarted: bool
    resumed_from: int | None
    resume_evidence: str | None
    recovery_s: float | None
    catch_up_s: float | None
    lost_steps: int | None
    lost_work_s: float | None
    slowdown: float | None
    note: str | None = None
    # decision (trigger met) to effect (the runtime's call returned: signal delivered, rule in effect); None in
    # histories written before the engine recorded its decision time
    effect_latency_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Worker events come from the probe, or from the engine reading a print-only job's progress.
_WORKER_SOURCES = (Source.WORKLOAD, Source.PROGRESS)


def steps(events: list[Event]) -> StepTable:
    """Step completions with an integer global step, in the history's order (time order once loaded)."""
    def compute() -> StepTable:
        table = step_table(events)
        if table.typed("step") is int:
            return table
        return table.select([i for i, s in enumerate(table.values("step")) if isinstance(s, int)])
    return memo(events, "steps", compute)


def step_completion_times(events: list[Event]) -> dict[int, float]:
    """Job-level completion time of each global step: its first completion by any rank (in any incarnation)."""
    out: dict[int, float] = {}
    table = steps(events)
    for s, t in zip(table.values("step"), table.values("t"), strict=True):
        if s not in out or t < out[s]:
            out[s] = t
    return out


def step_intervals(events: list[Event], t_from: float = float("-inf"), t_to: float = float("inf")) -> list[float]:
    """Wall time between consecutive steps (s-1 → s, same rank and process), for steps completed in [t_from, t_to].

    Measured between completions, so it includes data loading, communication and checkpointing: what a step
    really costs in wall time, not just the compute the workload timed.
    """
    starts, ends = _step_spans(events)
    return [t - start for start, t in zip(starts, ends, strict=True) if t_from <= t <= t_to]


def step_intervals_overlapping(events: list[Event], t_from: float, t_to: float) -> list[float]:
    """Wall time of the steps (s-1 → s, same process) whose execution overlapped [t_from, t_to].

    Unlike ``step_intervals`` this keeps the step that was in flight across the whole window: when an
    impairment stalls the job so that no step completes while it lasts, that step's duration is the slowdown.
    """
    starts, ends = _step_spans(events)
    return [t - start for start, t in zip(starts, ends, strict=True) if t > t_from and start < t_to]


def _step_spans(events: list[Event]) -> tuple[array[float], array[float]]:
    """(completions of steps s-1, completions of steps s) for every step of every process that also did s-1.

    Two arrays of floats rather than a list of pairs: 16 bytes a step instead of ~100 on a long history.
    """
    return memo(events, "step_spans", lambda: _compute_step_spans(events))


# A print-only job's steps are stamped when the engine reads its log (chaos.engine.progress, every POLL_S = 20 ms),
# not when the job printed them: the lines of one read are written microseconds apart, reads at least a tick apart.
READ_GAP_S = 0.01  # a gap this long between two scraped steps of one process: they came in different reads
PACE_WINDOW_S = 0.2  # scraped steps are timed over reads spanning at least this long (10 ticks): elapsed / steps


def _compute_step_spans(events: list[Event]) -> tuple[array[float], array[float]]:
    table = steps(events)
    step_no, times, sources = table.values("step"), table.values("t"), table.values("source")
    rows_of: dict[tuple[Any, Any], array[int]] = {}  # process → its rows, in order (8 bytes a step, not a dict entry)
    for row, key in enumerate(zip(table.values("node"), table.values("pid"), strict=True)):
        rows = rows_of.get(key)
        if rows is None:
            rows = rows_of[key] = array("q")
        rows.append(row)
    starts, ends = array("d"), array("d")
    for rows in rows_of.values():
        if sources[rows[0]] == Source.PROGRESS:
            for _, start, end in _scraped_spans([step_no[r] for r in rows], [times[r] for r in rows]):
                starts.append(start)
                ends.append(end)
            continue
        done = list(map(step_no.__getitem__, rows))
        if all(map(lt, done, islice(done, 1, None))):
            # Steps strictly increasing (the usual process): s-1, if this process did it, is the row just before.
            # The pairs are picked by C-level maps over the process's steps, not a Python loop per step.
            at = list(map(times.__getitem__, rows))
            follows = list(map(eq, done, map(sub, islice(done, 1, None), repeat(1))))  # step s-1 before s
            starts.extend(compress(at, follows))
            ends.extend(compress(islice(at, 1, None), follows))
            continue
        by_step: dict[int, float] = {}  # a step done twice by one process: its last completion counts
        for r in rows:
            by_step[step_no[r]] = times[r]
        for s, t in by_step.items():
            before = by_step.get(s - 1)
            if before is not None:
                starts.append(before)
                ends.append(t)
    return starts, ends


def _first_read_steps(table: StepTable, first: int) -> int:
    """How many steps (by number) the engine read together with row ``first`` of a print-only process."""
    step_no, t, nodes, pids = table.values("step"), table.values("t"), table.values("node"), table.values("pid")
    key, last = (nodes[first], pids[first]), first
    for r in sorted(range(len(t)), key=t.__getitem__):
        if t[r] <= t[first] or (nodes[r], pids[r]) != key:
            continue
        if t[r] - t[last] >= READ_GAP_S or step_no[r] <= step_no[last]:
            break
        last = r
    return max(1, step_no[last] - step_no[first] + 1)


def scraped_row_spans(table: StepTable) -> dict[int, tuple[float, float]]:
    """Row → (start, end) of every print-only step that has a span (see ``_scraped_spans``)."""
    rows_of: dict[tuple[Any, Any], list[int]] = {}
    for row, (source, node, pid) in enumerate(zip(table.values("source"), table.values("node"),
                                                  table.values("pid"), strict=True)):
        if source == Source.PROGRESS:
            rows_of.setdefault((node, pid), []).append(row)
    step_no, times = table.values("step"), table.values("t")
    out = {}
    for rows in rows_of.values():
        rows.sort(key=times.__getitem__)
        for i, start, end in _scraped_spans([step_no[r] for r in rows], [times[r] for r in rows]):
            out[rows[i]] = (start, end)
    return out


def _scraped_spans(done: list[int], at: list[float]) -> list[tuple[int, float, float]]:
    """Spans of one print-only process's steps, from the times the engine read them (see READ_GAP_S).

    A step's own duration is unknown when several were read at once (they are microseconds apart), so steps are
    timed in windows of whole reads spanning at least PACE_WINDOW_S: from the previous read's last step to the
    window's last read, divided by the steps done in between (by their numbers, so a job printing every k-th step
    counts k). Every step of the window gets that pace, ending at the window's end. A read that alone spans the
    window (a stall) is a window of its own. The process's first read has no start, so its steps have no span.
    """
    reads: list[tuple[int, int]] = []  # [first index, last index] of each read
    for i in range(len(done)):
        if reads and at[i] - at[i - 1] < READ_GAP_S and done[i] > done[i - 1]:
            reads[-1] = (reads[-1][0], i)
        else:
            reads.append((i, i))
    t0: float | None = None  # where the open window starts (the previous read's last step)
    s0 = 0
    window: list[int] = []
    out: list[tuple[int, float, float]] = []  # (index, start, end)

    def close(last: int) -> None:
        nonlocal t0, s0, window
        if window and t0 is not None and done[last] > s0 and at[last] > t0:
            pace = (at[last] - t0) / (done[last] - s0)
            out.extend((i, at[last] - pace, at[last]) for i in window)
        t0, s0, window = at[last], done[last], []

    for first, last in reads:
        if t0 is not None and done[first] <= s0:  # a step numbered again: no continuous span across it
            window = []
            t0 = None
        if t0 is None:
            t0, s0 = at[last], done[last]
            continue
        if window and at[last] - at[window[-1]] >= PACE_WINDOW_S:  # a long read alone: close what came before
            close(window[-1])
        window.extend(range(first, last + 1))
        if at[last] - t0 >= PACE_WINDOW_S:
            close(last)
    if window:
        close(window[-1])
    return out


def completion_time(events: list[Event]) -> float:
    """When the job first reported its final state (``run_finished``); infinity if it never did.

    Worker restarts after this (a worker that crashes while shutting down, then a new round that finds the
    final checkpoint and stops) happened to a finished job: they are counted apart and not blamed on a fault.
    """
    return min((e["t"] for e in of_kind(events, Ev.RUN_FINISHED)), default=float("inf"))


def faults_injected(events: list[Event]) -> list[Event]:
    return of_kind(events, Ev.FAULT_INJECTED)


def is_disruptive(fault: Event) -> bool:
    """Whether a ``fault_injected`` interrupts training by itself (the fault kind says so; the engine records it).

    Histories written before the field existed count every fault as disruptive: that only matters for a
    non-disruptive kind (a damaged checkpoint file), whose recovery figures then read "no step after the fault"
    or measure the job's normal pace instead of being left out.
    """
    return bool(fault.get("disruptive", True))


def first_disruptive_fault_t(events: list[Event]) -> float:
    """When the first fault that interrupts training took effect; infinity without one."""
    return min((f["t"] for f in faults_injected(events) if is_disruptive(f)), default=float("inf"))


def median_step_time(events: list[Event]) -> tuple[float | None, str]:
    """Fault-free median step time: from before the first disruptive fault, else from the whole run (said so)."""
    return memo(events, "median_step_time", lambda: _median_step_time(events))


def _median_step_time(events: list[Event]) -> tuple[float | None, str]:
    first_fault = first_disruptive_fault_t(events)
    before = step_intervals(events, t_to=first_fault)
    if len(before) >= 3:
        return statistics.median(before), "fault_free_run" if first_fault == float("inf") else "before_first_fault"
    whole = step_intervals(events)
    if whole:
        return statistics.median(whole), "whole_run"
    return None, "no_steps"


def _worker_starts(events: list[Event]) -> list[Event]:
    return [e for e in of_kind(events, Ev.PROCESS_STARTED) if e.get("source") in _WORKER_SOURCES]


def worker_restarts(events: list[Event]) -> int:
    """Worker incarnations after the first, before the job finished: every restart round starts a new rank 0."""
    done = completion_time(events)
    rank0 = [e for e in _worker_starts(events) if e.get("rank", 0) == 0 and e["t"] < done]
    return max(0, len(rank0) - 1)


def restarts_after_completion(events: list[Event]) -> int:
    """Restart rounds that began after the job had finished (see ``completion_time``)."""
    done = completion_time(events)
    return sum(1 for e in _worker_starts(events) if e.get("rank", 0) == 0 and e["t"] > done)


def _start_of(t: float, d: Any, fallback: float | None) -> float:
    """When a step began: its completion ``t`` less its own ``duration_s`` ``d`` (else ``fallback``)."""
    return t - (d if isinstance(d, (int, float)) else (fallback or 0.0))


def fault_metrics(events: list[Event]) -> list[FaultMetrics]:
    """Per fault: recovery, catch-up, lost steps and work, slowdown (see the metric definitions).

    The steps are searched by time with bisection, so a fault costs O(steps after it) rather than a pass over
    the whole history per figure.
    """
    injected = sorted(faults_injected(events), key=lambda e: e["t"])
    healed = {e["fault_id"]: e["t"] for e in of_kind(events, Ev.FAULT_HEALED) if "fault_id" in e}  # damage: none
    table = steps(events)
    times, step_no, durations = table.values("t"), table.values("step"), table.values("duration_s")
    nodes, pids = table.values("node"), table.values("pid")
    all_steps = time_order(times)  # row indices
    step_t = times if isinstance(all_steps, range) else [times[i] for i in all_steps]
    highest_by_index = _running_max(map(step_no.__getitem__, all_steps))
    starts = sorted(_worker_starts(events), key=lambda e: e["t"])
    start_t = [e["t"] for e in starts]
    # The job's own reports of what it loaded; the storage layer's loads (a null step for a torn file) count through
    # the rounds of a job judged from the storage layer (chaos.analysis.rounds), with the step their save held.
    loads = [e for e in checkpoint_events(events, Ev.CHECKPOINT_LOADED) if e.get("source") != Source.STORAGE]
    storage_loads = ({r.key: r for r in rounds(events) if r.loads}
                     if checkpoint_source(events) == Source.STORAGE else {})
    median, _ = median_step_time(events)
    done = completion_time(events)
    spof = run_environment(events).get("single_point_node")
    out = []
    for i, f in enumerate(injected):
        t_f = f["t"]
        disruptive = is_disruptive(f)
        later = [g["t"] for g in injected[i + 1:] if is_disruptive(g) and g["t"] > t_f]
        window_end = min(later[0] if later else float("inf"), done)
        n_before = bisect_left(step_t, t_f)
        highest = highest_by_index[n_before - 1] if n_before else None
        m = FaultMetrics(
            id=f.get("fault_id", i), kind=f.get("kind", "?"), target=str(f.get("target")), disruptive=disruptive,
            mechanism=f.get("mechanism"), t_injected=t_f, t_healed=healed.get(f.get("fault_id", i)),
            highest_step_before=highest, restarted=False, resumed_from=None, resume_evidence=None, recovery_s=None,
            catch_up_s=None, lost_steps=None, lost_work_s=None, slowdown=None,
            effect_latency_s=t_f - f["t_decided"] if isinstance(f.get("t_decided"), (int, float)) else None)
        out.append(m)
        if not disruptive:
            m.note = "does not interrupt training by itself, so it has no recovery figures"
            continue
        new_pids = {(e.get("node"), e.get("pid"))
                    for e in starts[bisect_right(start_t, t_f):bisect_left(start_t, window_end)]}
        m.restarted = bool(new_pids)
        after: Sequence[int] = all_steps[bisect_right(step_t, t_f):]
        if m.restarted:
            after = array("q", (i for i in after if (nodes[i], pids[i]) in new_pids))
        if not after:
            m.note = "the job completed no step after this fault"
            continue
        if not m.restarted and done == float("inf") and m.target == spof:
            # Under Ray a crash of the head leaves the workers training to their next report, which never returns:
            # steps after the fault by the old workers of a job that never finished are no recovery.
            m.note = (f"{m.target} is the job's single point of failure under its launcher and the job never "
                      "finished: the steps after this fault were its old workers running on, not a recovery")
            continue
        first = after[0]
        first_t, first_step = times[first], step_no[first]
        m.recovery_s = first_t - t_f
        if m.restarted:
            new_loads = [e for e in loads if e["t"] > t_f and (e.get("node"), e.get("pid")) in new_pids]
            stored = [storage_loads[k] for k in sorted(new_pids, key=str) if k in storage_loads]
            if new_loads:
                m.resumed_from = new_loads[0]["step"]
                m.resume_evidence = f"checkpoint_loaded: {new_loads[0].get('path')}"
            elif stored and (load := resume_load(events, stored[0])) is not None and (
                    held := intended_step(events, load)) is not None:
                m.resumed_from = held
                m.resume_evidence = f"checkpoint_loaded (storage layer): {load.get('path')}"
            else:
                m.resumed_from = first_step - 1
                on_disk = [e for e in of_kind(events, Ev.CHECKPOINT_SEEN) if e["t"] < first_t]
                m.resume_evidence = (f"inferred from the first step printed after the restart ({first_step})"
                                     + (f"; newest checkpoint on disk then: {on_disk[-1]['path']}" if on_disk else
                                        "; no checkpoint on disk"))
        else:
            m.resumed_from = highest if highest is not None else first_step - 1
        h = highest if highest is not None else 0
        # The work redone: from the checkpoint's step, or from where the job's progress went back to when that is
        # earlier (a restart that loads step 11 and trains from step 1 again redid 11 steps, not none).
        redone_from = min(m.resumed_from, first_step - 1) if m.restarted else m.resumed_from
        m.lost_steps = max(0, h - redone_from)
        target_step = h + 1
        caught = next((i for i in after if step_no[i] >= target_step), None)
        if caught is not None:
            m.catch_up_s = times[caught] - t_f
        if m.lost_steps:
            redo = [i for i in after if step_no[i] <= h]
            if redo:
                m.lost_work_s = max(times[i] for i in redo) - _start_of(times[redo[0]], durations[redo[0]], median)
        else:
            m.lost_work_s = 0.0
        t_heal = m.t_healed
        if t_heal is not None and median:
            during = step_intervals_overlapping(events, t_from=t_f, t_to=t_heal)
            if during:
                m.slowdown = statistics.median(during) / median
    return out


def _running_max(values: Iterable[int]) -> list[int]:
    """The highest value so far at each position (``max`` keeps the earlier of equal values)."""
    return list(accumulate(values, max))


def goodput(events: list[Event]) -> dict[str, Any]:
    """ideal time / actual time, with ideal = useful steps × fault-free median step time."""
    times = step_completion_times(events)
    median, basis = median_step_time(events)
    if not times or median is None:
        return {"goodput": None, "median_step_s": median, "median_basis": basis, "steps_completed": 0,
                "step_executions": 0, "training_time_s": None}
    table = steps(events)
    t = table.values("t")
    first = 0 if isinstance(events, History) else min(range(len(t)), key=t.__getitem__)  # a History is sorted
    scraped = table.values("source")[first] == Source.PROGRESS
    # a print-only job's first read can hold several steps: training began that many steps before it
    ahead = _first_read_steps(table, first) if scraped else 1
    actual = max(times.values()) - _start_of(t[first], table.values("duration_s")[first], median * ahead)
    useful = max(times)
    ratio = (useful * median / actual) if actual > 0 else None
    if scraped and ratio is not None:
        # a print-only job's median is a pace averaged over reads (see _scraped_spans), as its overall pace is:
        # above 1 is the two averages' noise, not a job that beat its own pace
        ratio = min(ratio, 1.0)
    return {
        "goodput": ratio,
        "median_step_s": median,
        "median_basis": basis,
        "steps_completed": useful,
        "step_executions": len(set(compress(zip(table.values("pid"), table.values("step"), strict=True),
                                            map(eq, table.values("rank", 0), repeat(0))))),  # rank 0's
        "training_time_s": actual,
    }
