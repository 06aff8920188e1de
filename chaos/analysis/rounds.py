"""Worker rounds of a job judged from the storage layer (a script that never imports ``chaos``): which checkpoint
each restart loaded, whether it was the newest valid one, and whether the steps printed after it continue exactly
where that checkpoint left off.

A round is one worker start: an inferred ``process_started`` (source ``progress``: the engine saw the printed
step go back, a new worker pid load a checkpoint, or torchrun report dead workers; see
``chaos.engine.progress.LogProgress``) or the probe's own. The storage layer's ``checkpoint_loaded`` lines carry
the real pid, not the inferred one, so each load is given to a round by time: an inferred start is written when
the round is first seen (its first printed step, or the failure that ended it), after its loads; the probe's
start precedes them. Definitions: docs/design.md, "Checkpoint verdicts".
"""

from __future__ import annotations

import os
import re
import statistics
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from chaos.analysis.ckpt_source import available_at, checkpoint_events, file_kind, newest, of_file_kinds
from chaos.analysis.load import memo, of_kind, step_table
from chaos.events import Ev, Source
from chaos.history import Event
from chaos.step_names import blank_timestamps

_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class Round:
    """One worker round: its start, its printed steps and the checkpoint loads given to it."""

    key: tuple[Any, Any]  # (node, pid) of its start, as its steps carry it
    t: float  # its start event's time
    inferred: bool  # started by the engine's inference (source progress), not reported by the probe
    first_step: int | None = None
    first_t: float | None = None
    last_t: float | None = None
    loads: list[Event] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.key[1]) if self.inferred else f"{self.key[0]}:{self.key[1]}"


def step_from_name(path: str) -> int | None:
    """The last number in a file's name (``ckpt_150.pt`` -> 150), as the storage layer reads it: never a date or a
    time of day (``checkpoint_2026-12-06_14-50-04.pt`` names no step)."""
    m = _LAST_NUMBER.search(blank_timestamps(os.path.basename(str(path))))
    return int(m.group(1)) if m else None


def rounds(events: list[Event]) -> list[Round]:
    """The job's worker rounds in start order, with their steps and the storage loads they made."""
    return memo(events, "rounds", lambda: _rounds(events))


def _rounds(events: list[Event]) -> list[Round]:
    starts = sorted((e for e in of_kind(events, Ev.PROCESS_STARTED)
                     if e.get("source") in (Source.WORKLOAD, Source.PROGRESS) and e.get("rank", 0) == 0),
                    key=lambda e: e["t"])
    out = [Round((e.get("node"), e.get("pid")), e["t"], e.get("source") == Source.PROGRESS) for e in starts]
    by_key = {r.key: r for r in out}
    table = step_table(events)
    rows = table.rows_where("source", lambda s: s in (Source.WORKLOAD, Source.PROGRESS))
    step_no, times, nodes, pids = (table.values(c) for c in ("step", "t", "node", "pid"))
    ranks = table.values("rank", 0)
    for r in rows:
        rnd = by_key.get((nodes[r], pids[r]))
        if rnd is None or ranks[r] != 0:
            continue
        if rnd.first_t is None or times[r] < rnd.first_t:
            rnd.first_t, rnd.first_step = times[r], step_no[r]
        rnd.last_t = times[r] if rnd.last_t is None else max(rnd.last_t, times[r])
    first_save: dict[tuple[Any, Any], float] = {}
    for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED):
        first_save.setdefault((e.get("node"), e.get("pid")), e["t"])
    start_t = [r.t for r in out]
    for load in checkpoint_events(events, Ev.CHECKPOINT_LOADED):
        if load.get("source") != Source.STORAGE or first_save.get((load.get("node"), load.get("pid")),
                                                                  float("inf")) < load["t"]:
            continue  # the probe's loads carry their own process; a saver reading its own file back is no resume
        i = _round_of(out, start_t, load["t"])
        if i is not None:
            out[i].loads.append(load)
    return out


def _round_of(out: list[Round], start_t: list[float], t: float) -> int | None:
    """The round a load at ``t`` belongs to: an inferred start comes after its loads, the probe's before them."""
    after = bisect_left(start_t, t)
    if after < len(out) and out[after].inferred:
        return after
    before = bisect_right(start_t, t) - 1
    return before if before >= 0 and not out[before].inferred else None


def _newest_of_kind(available: dict[str, dict[str, Any]], load: Event | None) -> dict[str, Any] | None:
    """The newest checkpoint a restart could have resumed from instead of what it loaded: of the loaded file's kind.
    A file of another kind that no restart reads back (Ray Train's ``checkpoint_manager_snapshot.json``, written
    beside the checkpoint folders after each report) is the framework's bookkeeping, not a checkpoint the job
    passed over; a load-less restart is compared with every kind (lost_all_progress)."""
    if load is None or not load.get("path"):
        return newest(available)
    return newest(of_file_kinds(available, frozenset({file_kind(str(load["path"]))}))) or newest(available)


def _describe(path: str, step: int | None) -> str:
    return f"{os.path.basename(str(path))} (step {step if step is not None else 'unknown'})"


def intended_step(events: list[Event], load: Event) -> int | None:
    """The step a loaded file holds: the storage layer's match with a finished save, else what its name or its
    last save said it was going to hold (a torn file)."""
    if isinstance(load.get("step"), int):
        return int(load["step"])
    saves = [e for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED)
             if e.get("path") == load.get("path") and e["t"] < load["t"] and isinstance(e.get("step"), int)]
    return saves[-1]["step"] if saves else step_from_name(load.get("path", ""))


def _step_is_from_name(events: list[Event], load: Event, step: int) -> bool:
    """Whether the step a loaded file holds was read from its path (exact) rather than from the progress the job
    had printed when its save began (a step behind for a job that saves before it prints): the storage layer
    says which on the save (``step_from``); a history from before it said is judged by the file name."""
    before = [e for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED) if e["t"] < load["t"]]
    saves = [e for e in before if load.get("sha256") and e.get("sha256") == load["sha256"]] or [
        e for e in before if e.get("path") == load.get("path")]
    said = saves[-1].get("step_from") if saves else None
    if said in ("name", "progress"):
        return said == "name" and saves[-1].get("step") == step
    return step_from_name(load["path"]) == step


def resume_load(events: list[Event], rnd: Round) -> Event | None:
    """The load that decides a round's resume point: the oldest step any of its ranks loaded, among the loads of
    files that were saved whole if there are any (a rank that read an emptied or torn file and then went on to an
    intact one resumed from the intact one)."""
    if not rnd.loads:
        return None

    def key(e: Event) -> tuple[bool, bool, int, float]:
        step = intended_step(events, e)
        return not isinstance(e.get("step"), int), step is None, step or 0, e["t"]

    return min(rnd.loads, key=key)


def restart_checks(events: list[Event]) -> list[dict[str, Any]]:
    """Each restart (round after the first): what it loaded vs the newest checkpoint complete and intact then.

    Loading a file that was not complete and intact (a torn save) is ``digests_ok``'s finding, not this one's:
    one cause, one failed verdict.
    """
    out = []
    for rnd in rounds(events)[1:]:
        load = resume_load(events, rnd)
        at = load["t"] if load else (rnd.first_t if rnd.first_t is not None else rnd.t)
        available = available_at(events, at)
        best = _newest_of_kind(available, load)
        entry: dict[str, Any] = {"t": at, "round": rnd.name, "loaded_path": load.get("path") if load else None,
                                 "loaded_step": intended_step(events, load) if load else None,
                                 "newest_valid_path": best["path"] if best else None,
                                 "newest_valid_step": best["step"] if best else None,
                                 "first_step_after": rnd.first_step}
        if best is None and load is not None:
            # nothing whole to compare with (a save set missing files: a job that saved its model and not yet
            # its optimizer); what it loaded is judged by digests_ok and exactly_once, not here
            entry["unjudged"] = "no whole save was available"
        elif best is not None and load is not None and rnd.first_step is None and not _older(entry, best):
            entry["unjudged"] = f"loaded {os.path.basename(str(load['path']))}, then died before training a step"
        if best is not None:
            newest_text = f"{_describe(best['path'], best['step'])} was complete and intact"
            if load is None and rnd.first_step is None:
                entry["note"] = "died before loading anything or training a step"
            elif load is None:
                entry["problem"] = "lost_all_progress"
                entry["why"] = f"started from scratch while {newest_text}"
            elif _older(entry, best):
                entry["problem"] = "resumed_from_stale"
                entry["why"] = f"loaded {_describe(load['path'], entry['loaded_step'])} while {newest_text}"
        out.append(entry)
    return out


def _older(entry: dict[str, Any], best: dict[str, Any]) -> bool:
    return entry["loaded_step"] is not None and entry["loaded_step"] < best["step"]


def step_continuity(events: list[Event]) -> dict[str, Any]:
    """Whether each restart in the surviving lineage printed, as its first step, the one after the step its
    checkpoint holds: ``steps_trained_twice`` / ``steps_skipped`` otherwise (an off-by-one resume).

    The step a checkpoint holds is the storage layer's: exact when the file's name carries it; otherwise it was
    taken from the progress the job had printed when the save began. That label is never ahead of what the file
    holds, but it is a step behind for a script that saves before it prints the step, so one step of slack is
    allowed then (and said) in the "skipped" direction only: a resume that prints the labelled step again trained
    it twice whatever the print order (the DDP tutorial's ``EPOCHS_RUN = epoch`` bug). A script that prints every
    k-th step gets k steps of slack.
    """
    all_rounds = rounds(events)
    printed = [r for r in all_rounds if r.first_t is not None]
    if not printed:
        return {"checked": False, "why": "no step was printed"}
    stride = _print_stride(events)
    saves = checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED)
    chain: list[dict[str, Any]] = []
    twice: list[tuple[int, int]] = []  # inclusive step ranges
    skipped: list[tuple[int, int]] = []
    problems: list[str] = []
    rnd: Round | None = printed[-1]
    seen: set[int] = set()
    while rnd is not None and id(rnd) not in seen:
        seen.add(id(rnd))
        load = resume_load(events, rnd)
        k = intended_step(events, load) if load else None
        if load is None or k is None:
            chain.append({"round": rnd.name, "loaded": load["path"] if load else None, "first_step": rnd.first_step})
            break
        exact = _step_is_from_name(events, load, k)
        slack = 0 if exact else 1
        f = rnd.first_step
        chain.append({"round": rnd.name, "loaded": load["path"], "checkpoint_step": k, "first_step": f,
                      "step_from": "file name" if exact else "printed progress (±1 step)"})
        if f is not None:
            said = f"resumed printing step {f} after loading {os.path.basename(load['path'])}, which holds step {k}"
            if f <= k:
                twice.append((f, k))
                problems.append(f"{said}: {_span(f, k)} trained twice")
            elif f > k + stride + slack:
                skipped.append((k + 1, f - 1))
                problems.append(f"{said}: {_span(k + 1, f - 1)} never trained")
        origin = [s for s in saves if s.get("sha256") == load.get("sha256") and s["t"] < load["t"]]
        rnd = _round_at(printed, origin[-1]["t"]) if origin else None
    chain.reverse()
    return {"checked": True, "lineage": chain, "steps_trained_twice": _first_steps(twice),
            "steps_skipped": _first_steps(skipped), "problems": problems, "print_stride": stride,
            "steps_trained_twice_count": sum(b - a + 1 for a, b in twice),
            "steps_skipped_count": sum(b - a + 1 for a, b in skipped)}


def _span(a: int, b: int) -> str:
    return f"step {a}" if a == b else f"steps {a}-{b}"


def _first_steps(spans: list[tuple[int, int]], keep: int = 20) -> list[int]:
    """The first ``keep`` distinct steps of some inclusive ranges (a resume from scratch can span millions)."""
    out: set[int] = set()
    for a, b in sorted(spans):
        out.update(range(a, min(b, a + keep) + 1))
    return sorted(out)[:keep]


def _round_at(printed: list[Round], t: float) -> Round | None:
    """The printing round that was running at ``t`` (the last one whose first step precedes it)."""
    before = [r for r in printed if r.first_t is not None and r.first_t <= t]
    return before[-1] if before else None


def _print_stride(events: list[Event]) -> int:
    """How many steps apart the job prints its progress (1 for a line per step), from consecutive printed steps."""
    table = step_table(events)
    by_process: dict[Any, list[int]] = {}
    for node, pid, s, rank in zip(table.values("node"), table.values("pid"), table.values("step"),
                                  table.values("rank", 0), strict=True):
        if rank == 0:
            by_process.setdefault((node, pid), []).append(s)
    gaps = [b - a for steps in by_process.values() for a, b in pairwise(steps) if b > a]
    return max(1, int(statistics.median(gaps))) if gaps else 1
