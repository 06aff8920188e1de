"""Checkpoint-correctness verdicts, from the history alone (plus the golden run's summary for the comparison).

Separate questions, each answered with ``ok`` (True / False / None = not checked), the measured details and a
one-line ``why``:

- ``digests_ok``: every checkpoint the job loaded was one whose save finished, with the same sha256 as recorded
  at save time (``loaded_corrupt`` otherwise, whether the job then crashed or trained on silently);
- ``resumed_from_newest_valid``: at each restart the job loaded the newest checkpoint that was complete and
  intact at that moment (``resumed_from_stale`` / ``lost_all_progress`` otherwise);
- ``matches_golden``: the final state equals a fault-free run's (``bitwise``), or is within tolerance when the
  world size changed (summation order changes), or ``diverged`` (with the first step whose loss differs);
- ``exactly_once``: in the surviving lineage every sample of a (complete) epoch was consumed exactly once;
- ``one_writer_per_file``: no checkpoint file was saved by two writers at once with different bytes;
- ``next_resume_intact``: the newest checkpoint on disk when the run ended, the one a restart would load next, is
  whole (``next_resume_torn`` otherwise: a crash during the last save that no restart came to load);
- ``replay_consistent``: the steps a resume trained again reproduce their first execution's losses within a
  resume's noise (``replay_diverged`` otherwise), with no golden run needed.
"""

from __future__ import annotations

import math
import os
import re
from array import array
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import groupby, pairwise
from typing import Any, NamedTuple

from chaos.analysis.ckpt_source import (
    _DIGITS,
    _temporaries,
    available_at,
    checkpoint_events,
    checkpoint_source,
    commit_file,
    loaded_kinds,
    loads_visible,
    newest,
    of_file_kinds,
    without_commit_file,
)
from chaos.analysis.load import memo, of_kind, of_kinds, step_table
from chaos.analysis.noise import (
    BAND_CEILING,
    CHANGED_WORLD_RTOL,
    LossComparison,
    band,
    compare_losses,
    int_losses,
)
from chaos.analysis.rounds import intended_step, restart_checks, step_continuity
from chaos.analysis.steps import MISSING, StepTable, time_order
from chaos.analysis.verdict import Compose, Verdict
from chaos.events import EndReason, Ev, Source
from chaos.history import Event


def _of(events: list[Event], name: Ev) -> list[Event]:
    """The workload's events of one kind (from the probe, or inferred from a print-only job's output)."""
    return memo(events, f"workload:{name}", lambda: [e for e in of_kind(events, name)
                                                     if e.get("source") in (Source.WORKLOAD, Source.PROGRESS)])


def worker_steps(events: list[Event]) -> StepTable:
    """The workload's steps (from the probe, or inferred from a print-only job's output), in order."""
    def compute() -> StepTable:
        table = step_table(events)
        return table.select(table.rows_where("source", lambda source: source in (Source.WORKLOAD, Source.PROGRESS)))
    return memo(events, "workload:steps", compute)


def _verdict(ok: bool | None, why: str, **details: Any) -> Verdict:
    return Verdict(ok, why, details)


# ------------------------------------------------------------------------------------------ availability

def _available_at(events: list[Event], t: float) -> dict[str, dict[str, Any]]:
    """Checkpoints complete and intact at time ``t`` (see ``chaos.analysis.ckpt_source.available_at``)."""
    return available_at(events, t)


def _loads_by_incarnation(events: list[Event]) -> list[dict[str, Any]]:
    """One entry per incarnation that started loading a checkpoint (the probe), or per process and file (the
    storage layer): what it tried, and what it got."""
    out: dict[Any, dict[str, Any]] = {}
    storage = checkpoint_source(events) == Source.STORAGE
    for e in checkpoint_events(events, Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED):
        kind = e.get("event")
        key = (e.get("node"), e.get("pid"), e.get("path")) if storage else (
            e.get("incarnation") or (e.get("node"), e.get("pid")))
        step = intended_step(events, e) if storage else e["step"]
        entry = out.setdefault(key, {"incarnation": key, "t": e["t"], "step": step, "path": e["path"],
                                     "sha256": None, "by_rank": {}})
        if kind == Ev.CHECKPOINT_LOADED:
            entry["sha256"] = entry["sha256"] or e.get("sha256")
            if not storage and e.get("rank") is not None:
                entry["by_rank"].setdefault(e["rank"], (e.get("path"), e.get("sha256")))
    return sorted(out.values(), key=lambda x: x["t"])


def _ranks_disagree(load: dict[str, Any]) -> str | None:
    """Which rank of one incarnation loaded other bytes of the same checkpoint file than the first rank did.

    Every rank that loads the file its incarnation chose must read the same bytes: a rank that read others (a
    node-local copy, a stale cache) trains from other weights, which a job that does not broadcast them after the
    load (DDP does at construction; a hand-written loop may not) never repairs. Only ranks that report the very
    path the first did are compared: the shards of a sharded checkpoint (FSDP, DCP, ZeRO: one file per rank, often
    of one name in per-rank directories) differ by design, and a path seen otherwise on another host is not
    known to be the same file."""
    name = os.path.basename(str(load["path"]))
    same_file = sorted((rank, sha) for rank, (path, sha) in load["by_rank"].items()
                       if path == load["path"] and sha is not None)
    if not same_file:
        return None
    first_rank, first = same_file[0]
    for rank, sha in same_file[1:]:
        if sha != first:
            return f"rank {rank} loaded other bytes of {name} (sha256 {str(sha)[:12]}) than rank {first_rank} " \
                   f"({str(first)[:12]})"
    return None


def _load_problem(events: list[Event], load: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the digest recorded by the file's last finished save, what is wrong with the bytes the job loaded)."""
    saves = [e for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED)
             if e.get("path") == load["path"] and e["t"] < load["t"]]
    finished = [e for e in saves if e.get("event") == Ev.CHECKPOINT_SAVE_FINISHED]
    last = finished[-1] if finished else None
    recorded = last.get("sha256") if last else None
    overwritten = [e for e in saves if e.get("event") == Ev.CHECKPOINT_SAVE_STARTED and (last is None or
                                                                                         e["t"] > last["t"])]
    if last is None or recorded is None:
        return recorded, "its save never finished (torn or partial file)"
    if overwritten and load["sha256"] != recorded:
        return recorded, (f"a later save (step {overwritten[-1].get('step')}) started over it and never finished: "
                          "the bytes read match no completed save (torn, partial or unverified file)")
    if load["sha256"] is None:
        return recorded, "the load never completed (the job died loading it)"
    if (disagree := _ranks_disagree(load)) is not None:
        return recorded, disagree
    if load["sha256"] != recorded:
        older = [e for e in finished if e.get("sha256") == load["sha256"]]
        if older:
            return recorded, (f"it holds the bytes of an older save (step {older[-1].get('step')}), not of its "
                              f"last (step {last.get('step')})")
        return recorded, "the loaded bytes differ from those saved (corrupted on storage)"
    return recorded, None


def digests_ok(events: list[Event]) -> Verdict:
    visible, how = loads_visible(events)
    if not visible:
        return _verdict(None, f"not checked: {how}", loads=[])
    loads = _loads_by_incarnation(events)
    if not loads:  # nothing was read back: no bytes were seen to judge (never "ok" about what was not seen)
        return _verdict(None, "not checked: no checkpoint was loaded", loads=[])
    checked = []
    for load in loads:
        recorded, problem = _load_problem(events, load)
        entry = {"step": load["step"], "path": load["path"], "recorded_sha256": recorded,
                 "loaded_sha256": load["sha256"]}
        if problem:
            entry["problem"] = problem
        checked.append(entry)
    bad = [entry for entry in checked if "problem" in entry]
    if bad:
        first = bad[0]
        return _verdict(False, f"loaded_corrupt: checkpoint of step {first['step']} "
                               f"({os.path.basename(str(first['path']))}): {first['problem']}",
                        loads=checked, verdict="loaded_corrupt")
    return _verdict(True, f"all {len(checked)} loaded checkpoint(s) matched the digest recorded at save time",
                    loads=checked)


def _restarts(events: list[Event]) -> list[dict[str, Any]]:
    """Every worker incarnation after the first, with the checkpoint it loaded (None = started from scratch)."""
    starts: dict[Any, float] = {}
    table = worker_steps(events)
    for inc, node, pid, t in zip(table.values("incarnation"), table.values("node"), table.values("pid"),
                                 table.values("t"), strict=True):
        starts.setdefault(inc or (node, pid), t)
    loads = {x["incarnation"]: x for x in _loads_by_incarnation(events)}
    for key, load in loads.items():
        starts[key] = min(starts.get(key, load["t"]), load["t"])
    ordered = sorted(starts.items(), key=lambda kv: kv[1])
    return [{"incarnation": k, "t": t, "load": loads.get(k)} for k, t in ordered[1:]]


def resumed_from_newest_valid(events: list[Event]) -> Verdict:
    if checkpoint_source(events) != Source.WORKLOAD and not any(worker_steps(events).values("incarnation")):
        return _resumed_print_only(events)
    if not any(worker_steps(events).values("incarnation")):
        return _verdict(None, "not checked: the workload does not report its incarnation through chaos.probe")
    restarts = _restarts(events)
    if not restarts:
        return _verdict(True, "the job never restarted", restarts=[])
    checked = []
    for r in restarts:
        at = r["load"]["t"] if r["load"] else r["t"]
        available = _available_at(events, at)
        best = newest(available)
        loaded = r["load"]["step"] if r["load"] else None
        entry = {"t": at, "loaded_step": loaded, "newest_valid_step": best["step"] if best else None}
        if best is not None and loaded is None:
            entry["problem"] = "lost_all_progress"
        elif best is not None and loaded is not None and loaded < best["step"]:
            entry["problem"] = "resumed_from_stale"
        checked.append(entry)
    bad = [entry for entry in checked if "problem" in entry]
    if bad:
        b = bad[0]
        what = {"lost_all_progress": f"started from scratch while the checkpoint of step {b['newest_valid_step']} "
                                     "was valid",
                "resumed_from_stale": f"loaded step {b['loaded_step']} while step {b['newest_valid_step']} was "
                                      "complete and intact"}[b["problem"]]
        return _verdict(False, f"{b['problem']}: {what}", restarts=checked, verdict=b["problem"])
    return _verdict(True, f"each of {len(checked)} restart(s) resumed from the newest valid checkpoint",
                    restarts=checked)


def _resumed_print_only(events: list[Event]) -> Verdict:
    """A job without the probe's incarnations: its rounds (inferred restarts) and the storage layer's loads."""
    visible, how = loads_visible(events)
    if not visible:
        return _verdict(None, f"not checked: {how}, so the checkpoint each restart loaded is unknown")
    checked = restart_checks(events)
    if not checked:
        return _verdict(True, "the job never restarted", restarts=[])
    bad = [entry for entry in checked if "problem" in entry]
    if bad:
        b = bad[0]
        return _verdict(False, f"{b['problem']}: {b['why']}", restarts=checked, verdict=b["problem"])
    # A restart that had no whole save to choose from, or that died after its load before training a step, says
    # nothing about which checkpoint it resumed from: not checked, unless another restart was judged.
    unjudged = [e for e in checked if e.get("unjudged")]
    if all(e.get("unjudged") or e.get("note") for e in checked):
        reasons = Counter(e.get("unjudged") or e["note"] for e in checked)
        return _verdict(None, f"not checked: none of {len(checked)} restart(s) could be judged ("
                              + "; ".join(f"{n}: {why}" for why, n in reasons.items()) + ")", restarts=checked)
    checked_now = [e for e in checked if not e.get("unjudged")]
    # Only a restart that loaded the newest valid file itself "resumed from" it; one that loaded a torn file (that
    # is digests_ok's finding) or died first did not go back to an older checkpoint, and is said as such.
    # (a file of a whole save set that is not the one named newest is still whole: DCP's marker, its shards)
    torn = [e for e in checked_now if e.get("loaded_path")
            and e.get("newest_valid_path") not in (None, e["loaded_path"])
            and e["loaded_path"] not in available_at(events, e["t"])]
    died = [e for e in checked_now if e.get("note")]
    if not torn and not died and not unjudged:
        return _verdict(True, f"each of {len(checked)} restart(s) resumed from the newest valid checkpoint",
                        restarts=checked)
    parts = [f"none of {len(checked_now)} restart(s) went back to an older checkpoint than the newest valid one"]
    if unjudged:
        parts.append(f"{len(unjudged)} not judged: {unjudged[0]['unjudged']}")
    if torn:
        parts.append(f"{len(torn)} loaded {os.path.basename(torn[0]['loaded_path'])}, which was not a complete save "
                     "(see digests_ok)")
    if died:
        parts.append(f"{len(died)} died before loading anything or training a step")
    return _verdict(True, "; ".join(parts), restarts=checked)


def last_new_step(events: list[Event]) -> tuple[int, float] | None:
    """The highest step any worker completed and when it was first completed (after it, no progress), or None."""
    table = worker_steps(events)
    if not len(table):
        return None
    steps, times = table.values("step"), table.values("t")
    top = max(steps)
    return top, min(t for s, t in zip(steps, times, strict=True) if s == top)


def restart_loop_cause(events: list[Event]) -> str | None:
    """The checkpoint the job kept loading after its last progress (a crash loop on a damaged file), with what is
    wrong with it; None when no load followed the last new step."""
    last = last_new_step(events)
    if last is None:
        return None
    top, stalled_since = last
    loads = [x for x in _loads_by_incarnation(events) if x["t"] > stalled_since]
    if not loads:
        return None
    paths = Counter(x["path"] for x in loads)
    path, _ = paths.most_common(1)[0]
    mine = [x for x in loads if x["path"] == path]
    who = (f"{len(mine)} worker process(es)" if checkpoint_source(events) == Source.STORAGE else
           f"{len(mine)} worker round(s)")
    problem = next((p for p in (_load_problem(events, x)[1] for x in mine) if p), None)
    name = os.path.basename(str(path))
    return (f"after step {top} (its last new step) {who} loaded {name} (step {mine[-1]['step']})"
            f"{': ' + problem if problem else ''}")


# ------------------------------------------------------------------------------------------ lineage

def lineage(events: list[Event]) -> tuple[list[dict[str, Any]], str | None]:
    """The incarnations whose steps make up the final model, oldest first, each with its step range (a, b] and
    ``rows``: its steps in that range, as row indices into ``worker_steps(events)``.

    Followed backwards from the final incarnation through the checkpoint it loaded to the incarnation that
    saved that checkpoint. Without incarnation ids (print-only jobs) it is the last execution of each step.
    """
    return memo(events, "lineage", lambda: _lineage(events))  # several checkers and the loss plot ask


def _lineage(events: list[Event]) -> tuple[list[dict[str, Any]], str | None]:
    table = worker_steps(events)
    if not len(table):
        return [], "no step completed"
    step_no = table.values("step")
    by_incarnation: dict[Any, array[int]] = {}  # rows as 8-byte integers, not a list of int objects
    for row, inc in enumerate(table.values("incarnation")):
        rows = by_incarnation.get(inc)
        if rows is None:
            rows = by_incarnation[inc] = array("q")
        rows.append(row)
    if not any(by_incarnation.keys()):
        # each rank's last execution of each step (a step's rows of all its ranks, not only the last one to report)
        last: dict[tuple[int, Any], int] = {}
        for row, (s, rank) in enumerate(zip(step_no, table.values("rank", 0), strict=True)):
            last[(s, rank)] = row
        return [{"incarnation": None, "a": 0, "b": max(s for s, _ in last), "rows": list(last.values())}], None
    finished = _of(events, Ev.RUN_FINISHED)
    if finished:
        inc, end = finished[-1].get("incarnation"), finished[-1]["step"]
    else:
        times = table.values("t")
        final = max(range(len(times)), key=times.__getitem__)
        inc, end = table.values("incarnation")[final], step_no[final]
    loads = {x["incarnation"]: x for x in _loads_by_incarnation(events)}
    saves = checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED)
    chain: list[dict[str, Any]] = []
    problem = None
    seen = set()
    while inc is not None and inc not in seen:
        seen.add(inc)
        load = loads.get(inc)
        start = load["step"] if load else 0
        chain.append({"incarnation": inc, "a": start, "b": end,
                      "rows": array("q", (r for r in by_incarnation.get(inc, ()) if start < step_no[r] <= end))})
        if not load:
            break
        origin = [s for s in saves if s["path"] == load["path"] and s["step"] == load["step"] and s["t"] < load["t"]]
        if not origin:
            problem = f"the checkpoint of step {load['step']} loaded at a restart was never saved completely"
            break
        inc, end = origin[-1].get("incarnation"), load["step"]
    chain.reverse()
    return chain, problem


def _each_rank_advances(rows: Sequence[int], step_no: Sequence[Any], ranks: Sequence[Any]) -> bool:
    """Whether each rank's steps strictly increase along ``rows`` (then no (step, rank) comes twice)."""
    last: dict[Any, Any] = {}
    try:
        for r in rows:
            rank, s = ranks[r], step_no[r]
            if rank in last and not s > last[rank]:
                return False
            last[rank] = s
    except TypeError:  # a rank or step that cannot be compared or be a key: take the general path
        return False
    return True


def exactly_once(events: list[Event]) -> Verdict:
    chain, problem = lineage(events)
    if not chain:
        return _verdict(None, f"not checked: {problem}")
    consumed: dict[int, array[int]] = defaultdict(lambda: array("q"))  # epoch -> rows whose ids the lineage consumed
    dataset_size = None
    missing_steps: list[int] = []
    unrecorded: list[dict[str, Any]] = []
    has_ids = False
    table = worker_steps(events)
    step_no, ranks = table.values("step"), table.values("rank", 0)
    epochs, sizes = table.values("epoch", 0), table.values("dataset_size", MISSING)
    for seg in chain:
        rows = seg["rows"]
        if _each_rank_advances(rows, step_no, ranks):  # no (step, rank) twice: every row counts, in order
            kept: Any = rows
            present = {step_no[r] for r in rows}
        else:  # a (step, rank) done twice in one incarnation counts once (its last row, at its first place)
            by_step_rank: dict[tuple[int, Any], int] = {}
            for r in rows:
                by_step_rank[(step_no[r], ranks[r])] = r
            kept = by_step_rank.values()
            present = {s for s, _ in by_step_rank}
        missing_steps += [s for s in range(seg["a"] + 1, seg["b"] + 1) if s not in present]
        if seg["incarnation"] is not None and seg is not chain[-1]:  # an incarnation that ended and was resumed
            unrecorded += _unrecorded(kept, step_no, ranks, epochs, table)
        with_ids = table.rows_with_ids(kept)
        # the rows of one epoch come one after another: appended a run at a time, not row by row
        for epoch, rows_of_epoch in groupby(with_ids, key=epochs.__getitem__):
            has_ids = True
            consumed[int(epoch)].extend(rows_of_epoch)
        dataset_size = _last_size(with_ids, sizes, dataset_size)
    if not has_ids or dataset_size is None:
        return _steps_once(events)
    duplicates: dict[int, list[int]] = {}
    skipped: dict[int, list[int]] = {}
    explained: dict[int, int] = {}  # epoch -> ids missing from the records that the unrecorded rows can hold
    room: Counter[int] = Counter()
    for u in unrecorded:
        room[u["epoch"]] += u["ids"]
    complete = []
    last_epoch = max(consumed, default=0)
    for epoch, rows in sorted(consumed.items()):
        ids = table.ids_of(rows)  # one epoch's ids at a time (a few thousand), read from the table as needed
        seen_total = len(ids)
        distinct = set(ids)
        if len(distinct) < seen_total:  # counting is needed only when something was consumed twice
            duplicates[epoch] = sorted(i for i, c in Counter(ids).items() if c > 1)
        # an epoch is judged for skips only when the lineage ran through it (the run got past its end)
        ran_through = epoch < last_epoch or seen_total >= dataset_size
        if ran_through:
            complete.append(epoch)
            miss = sorted(set(range(dataset_size)) - distinct)
            if miss and len(miss) <= room[epoch]:
                explained[epoch] = len(miss)
            elif miss:
                skipped[epoch] = miss
    details = {"epochs_checked": complete, "lineage": [{"incarnation": s["incarnation"], "from_step": s["a"],
                                                         "to_step": s["b"]} for s in chain],
               "duplicates": {e: len(v) for e, v in duplicates.items()},
               "skipped": {e: len(v) for e, v in skipped.items()}, "steps_missing": missing_steps[:20]}
    if unrecorded:
        details["unrecorded"] = unrecorded[:20]
    if explained:
        details["missing_but_unrecorded"] = explained
    if problem:
        details["lineage_problem"] = problem
    if duplicates or skipped:
        n_dup = sum(len(v) for v in duplicates.values())
        n_skip = sum(len(v) for v in skipped.values())
        where = f"; step(s) {missing_steps[:5]} never trained in the surviving lineage" if missing_steps else ""
        return _verdict(False, f"{n_dup} sample(s) consumed twice and {n_skip} skipped in the surviving lineage"
                               f"{where}", **details)
    caveat = ""
    if explained:
        lost = [u for u in unrecorded if u["epoch"] in explained]
        u = lost[0]
        caveat = (f"; {sum(explained.values())} id(s) of epoch(s) {sorted(explained)} are in no record, as many as "
                  f"{len(lost)} step record(s) that never arrived can hold (rank {u['rank']}'s step {u['step']}, "
                  "after its last record in an incarnation that ended: a rank killed between the step's "
                  "collective and its record)")
    if not complete:  # no epoch ran through: nothing can be said about skips, and no duplicate was seen
        seen = sum(len(rows) for rows in consumed.values())
        return _verdict(None, f"not checked: no epoch was completed in the surviving lineage (no sample consumed twice "
                              f"in {seen} step record(s) of epoch(s) {sorted(consumed)}){caveat}", **details)
    return _verdict(True, f"every sample consumed exactly once in {len(complete)} complete epoch(s){caveat}",
                    **details)


def _last_size(rows: Iterable[int], sizes: Sequence[Any], before: Any) -> Any:
    """The dataset size the last of ``rows`` that says one gave (``before`` when none does)."""
    for r in reversed(rows if isinstance(rows, Sequence) else list(rows)):
        if sizes[r] is not MISSING:
            return sizes[r]
    return before


def _unrecorded(rows: Sequence[int], step_no: Sequence[Any], ranks: Sequence[Any], epochs: Sequence[Any],
                table: StepTable) -> list[dict[str, Any]]:
    """Steps of the lineage that some of the incarnation's ranks recorded and another did not.

    A rank killed right after a step's collective (SIGKILL, the OOM killer) trained that step (the others could not
    have finished it without it) but never sent its record: its samples were consumed and are in no record. Only
    the steps after a rank's last record in an incarnation that ended (the caller passes no other) count: a gap
    in the middle of a rank's records is no kill. Each such (step, rank) can hold as many ids as that rank's last
    recorded step; the ids missing from an epoch are a skip only beyond that room (a wrong resume on top of such
    a kill still shows)."""
    per_step = Counter(step_no[r] for r in rows)
    world = table.values("world_size", None)
    size_at = {step_no[r]: world[r] for r in rows}  # the world each step was trained in, as its ranks said
    short = {s for s, n in per_step.items() if isinstance(size_at[s], int) and n < size_at[s]}
    if not short:
        return []
    have: dict[Any, set[Any]] = defaultdict(set)
    epoch_of: dict[Any, Any] = {}
    size_of: dict[Any, list[tuple[Any, int]]] = defaultdict(list)  # rank -> (step, ids) of its recorded steps
    for r in rows:
        ids = table.sample_ids(r)
        if ids is not None:
            size_of[ranks[r]].append((step_no[r], len(ids)))
        if step_no[r] in short:
            have[step_no[r]].add(ranks[r])
            epoch_of[step_no[r]] = int(epochs[r])
    out = []
    for s in sorted(short):
        # only a rank that recorded steps in this incarnation, and none from this one on, lost its record of it (a
        # job where some ranks never report, or a gap between two records, is not a kill)
        for rank in sorted((set(range(size_at[s])) & set(size_of)) - have[s], key=str):
            last_step, last_ids = max(size_of[rank])
            if s > last_step:
                out.append({"step": s, "rank": rank, "epoch": epoch_of[s], "ids": last_ids})
    return out


PROBE_CALL = ("one probe call per step, chaos.probe.step_completed(step, sample_ids=..., epoch=..., "
              "dataset_size=...), would check every sample")


def _steps_once(events: list[Event]) -> Verdict:
    """Without sample ids: the step-level half of the question for a job judged from the storage layer (was a
    step trained twice or skipped at a restart?). A failure is proven; a pass is not claimed for the samples."""
    if any(worker_steps(events).values("incarnation")) or checkpoint_source(events) == Source.WORKLOAD:
        return _verdict(None, f"not checked: the workload does not report sample_ids and dataset_size; "
                              f"{PROBE_CALL}")
    visible, how = loads_visible(events)
    if not visible:
        return _verdict(None, f"not checked: {how}, so the step each restart resumed from is unknown; "
                              f"{PROBE_CALL}")
    steps = step_continuity(events)
    if not steps["checked"]:
        return _verdict(None, f"not checked: {steps['why']}; {PROBE_CALL}")
    details = {k: steps[k] for k in ("lineage", "steps_trained_twice", "steps_skipped", "steps_trained_twice_count",
                                     "steps_skipped_count", "print_stride")}
    if steps["problems"]:
        kind = "steps_trained_twice" if steps["steps_trained_twice"] else "steps_skipped"
        return _verdict(False, f"{kind}: {steps['problems'][0]}", verdict=kind, **details)
    resumed = [seg for seg in steps["lineage"] if seg.get("checkpoint_step") is not None]
    said = "; ".join(f"resumed at step {seg['first_step']} from a checkpoint holding step {seg['checkpoint_step']}"
                     + (f" or {seg['checkpoint_step'] + 1} (read from the printed progress)"
                        if "±" in str(seg.get("step_from")) else "")
                     for seg in resumed[:3])
    return _verdict(None, f"not checked for samples: no step trained twice or skipped in the surviving lineage"
                          f"{' (' + said + ')' if said else ''}; {PROBE_CALL}", **details)


# ------------------------------------------------------------------------------------------ golden

# golden.json's ``world_size_basis``: 2 = each step's world size as the job ran it (a print-only job's from its
# rendezvous rounds and the plan); absent (1) = the probe's ``world_size``, 1 where a step did not say (a cached
# summary from before): compared with the same rule, so an old cache never reads as a changed world size.
WORLD_SIZE_BASIS = 2

_NNODES = re.compile(r"^--nnodes[=](?P<min>\d+)(?::(?P<max>\d+))?$")
_NPROC = re.compile(r"^--nproc[-_]per[-_]node[=](?P<n>\d+)$")


def _planned_world(events: list[Event]) -> tuple[int | None, int]:
    """(the workers the plan starts: nodes × processes per node, or None without a plan; processes per node), read
    from the torchrun command lines the plan gives each node."""
    started = next(iter(of_kind(events, Ev.RUN_STARTED)), {})
    plan = started.get("plan") if isinstance(started.get("plan"), dict) else {}
    nodes = [n for n in plan.get("nodes") or () if isinstance(n, dict) and n.get("role", "node") == "node"]
    per_node = 1
    for n in nodes:
        for arg in n.get("argv") or ():
            m = _NPROC.match(str(arg))
            if m:
                per_node = int(m["n"])
    return (len(nodes) * per_node if nodes else None), per_node


def step_world_sizes(events: list[Event], rows: Iterable[int]) -> list[int]:
    """The world size each of ``rows`` (of ``worker_steps``) was trained in: the probe's ``world_size`` (absent: 1,
    a process not under torchrun); for a step read from a print-only job's output the size of the rendezvous round
    it ran in (the last ``agent_rendezvous_completed`` before it: nodes in the round × processes per node), else
    the plan's."""
    table = worker_steps(events)
    said, times, sources = table.values("world_size", None), table.values("t"), table.values("source")
    planned, per_node = _planned_world(events)
    rounds = sorted((e["t"], e["group_world_size"] * per_node) for e in of_kind(events, Ev.AGENT_RENDEZVOUS_COMPLETED)
                    if isinstance(e.get("group_world_size"), int))
    round_times = [t for t, _ in rounds]
    out = []
    for r in rows:
        if said[r] is not None or sources[r] != Source.PROGRESS:
            out.append(1 if said[r] is None else said[r])
            continue
        i = bisect_right(round_times, times[r])
        out.append(rounds[i - 1][1] if i else planned or 1)
    return out


def golden_summary(events: list[Event]) -> dict[str, Any]:
    """What a later faulted run compares with: per-step losses, final state digest, world size."""
    losses: dict[int, float] = {}
    table = worker_steps(events)
    for s, loss, rank in zip(table.values("step"), table.values("loss"), table.values("rank", 0), strict=True):
        if loss is not None and rank == 0:
            losses[s] = loss
    finished = _of(events, Ev.RUN_FINISHED)
    return {"losses": {str(k): v for k, v in sorted(losses.items())},
            "state_sha256": finished[-1].get("state_sha256") if finished else None,
            "world_sizes": sorted(set(step_world_sizes(events, range(len(table))))),
            "world_size_basis": WORLD_SIZE_BASIS, "steps": max(losses) if losses else 0,
            "completed": any(e.get("reason") == EndReason.COMPLETED for e in of_kind(events, Ev.RUN_ENDED)),
            # a federated job's final evaluation (its server's run_finished): the quality row compares with it
            **({"federated_final": {"round": finished[-1].get("step"), "eval_loss": finished[-1].get("eval_loss"),
                                    "eval_accuracy": finished[-1].get("eval_accuracy")}}
               if finished and "eval_accuracy" in finished[-1] else {})}


class LineageLosses(NamedTuple):
    """Rank 0's losses along the surviving lineage and what the golden comparison needs to know about them."""

    losses: dict[int, float]
    not_finite: list[int]  # the steps whose loss was not finite (the probe records NaN or inf as null)
    world_sizes: set[Any]  # the world sizes the lineage's steps ran in (``step_world_sizes``)
    done: bool  # the run finished: a ``run_finished``, or a print-only job that ended ``completed``
    legacy_world_sizes: set[Any]  # the same by the old rule (the probe's field, 1 where absent): old golden.json
    printed: bool  # the losses were read from the job's printed output (a print-only job), not from the probe
    end: str  # how the run ended (its ``run_ended`` reason), for a run that did not finish


def _lineage_losses(events: list[Event]) -> LineageLosses:
    """Rank 0's losses along the surviving lineage, the steps whose loss was not finite, the world sizes seen,
    and whether the run finished (a ``run_finished``, or a print-only job that ended ``completed``: a print-only
    job that hung or failed printed only the steps it reached, which is no divergence)."""
    finished = _of(events, Ev.RUN_FINISHED)
    chain, _ = lineage(events)
    rows = [r for seg in chain for r in seg["rows"]]
    table = worker_steps(events)
    sources = table.values("source")
    printed = any(sources[r] == Source.PROGRESS for r in rows)
    ends = of_kind(events, Ev.RUN_ENDED)
    end = str(ends[-1].get("reason")) if ends else "without run_ended (incomplete history)"
    done = bool(finished) or (printed and end == EndReason.COMPLETED)
    run_losses: dict[int, float] = {}
    not_finite: list[int] = []  # the probe records a NaN or infinite loss as null
    step_no, ranks, legacy = table.values("step"), table.values("rank", 0), table.values("world_size", 1)
    losses, has_loss = table.values("loss"), table.has("loss")
    for r in rows:
        if ranks[r] == 0 and has_loss[r]:
            if losses[r] is None:
                not_finite.append(step_no[r])
            else:
                run_losses[step_no[r]] = losses[r]
    return LineageLosses(run_losses, not_finite, set(step_world_sizes(events, rows)), done,
                         {legacy[r] for r in rows}, printed, end)


def _world_size_changed(run: LineageLosses, golden: dict[str, Any]) -> bool:
    """Whether the run's world sizes differ from the golden run's, by the rule its summary was made with."""
    mine = run.world_sizes if golden.get("world_size_basis") == WORLD_SIZE_BASIS else run.legacy_world_sizes
    return sorted(mine) != golden["world_sizes"]


def first_resume_step(events: list[Event]) -> int | None:
    """The step the run's first restart resumed from: the first step rank 0 completed in a new process, minus one.
    None when no worker process ever replaced the first one."""
    table = worker_steps(events)
    first = None
    for s, rank, node, pid in zip(table.values("step"), table.values("rank", 0), table.values("node"),
                                  table.values("pid"), strict=True):
        if rank != 0:
            continue
        if first is None:
            first = (node, pid)
        elif (node, pid) != first:
            return max(0, s - 1)
    return None


def control_request(events: list[Event], golden: dict[str, Any] | None, rtol: float | None) -> int | None:
    """The step a control run must resume at, or None when the verdict needs none: no usable golden run, a pinned
    tolerance, a changed world size, losses bitwise equal (the reference workload never pays for a control run),
    a difference beyond any noise band, a run that did not finish, or no restart to reproduce."""
    if rtol is not None or not golden or not golden.get("completed") or golden.get("trusted") is False:
        return None
    run = _lineage_losses(events)
    if not run.done or run.not_finite or _world_size_changed(run, golden):
        return None
    cmp = compare_losses(run.losses, int_losses(golden["losses"]))
    if len(cmp.steps) < golden["steps"] or cmp.max_rel == 0 or cmp.max_rel > BAND_CEILING:
        return None
    return first_resume_step(events)


def matches_golden(events: list[Event], golden: dict[str, Any] | None, rtol: float | None = None,
                   control: dict[str, Any] | None = None) -> Verdict:
    """The run's losses (and final state) against the fault-free run's: ``bitwise``; ``within_noise`` of a clean
    resume measured by the control run (same world size, no pinned ``rtol``); ``within_tolerance`` of ``rtol``
    (pinned by the user, or CHANGED_WORLD_RTOL when the world size changed); else ``diverged``. See
    chaos.analysis.noise for why the noise is measured."""
    if golden is None:
        return _verdict(None, "not checked: no golden run (checks.golden is off)", mode="not_checked")
    if not golden.get("completed"):
        # how it ended and where it is: a fault-free run that did not complete is itself a finding to read
        how = ", ".join(f"{k} {golden[k]}" for k in ("end_reason", "run_dir") if golden.get(k))
        return _verdict(None, f"not checked: the golden run did not complete{f' ({how})' if how else ''}",
                        mode="not_checked")
    if golden.get("trusted") is False:  # it restarted itself twice: not a fault-free reference
        return _verdict(None, f"not checked: the golden run cannot be trusted ({golden.get('untrusted_why')})",
                        mode="not_checked")
    run = _lineage_losses(events)
    run_losses, not_finite, world_sizes = run.losses, run.not_finite, run.world_sizes
    if not run.done:  # fewer steps than the golden run is what a run that did not finish has: no divergence
        if run.end == EndReason.COMPLETED:  # the probe's job exited without saying its final state
            return _verdict(None, "not checked: the job ended without reporting its final state (no run_finished "
                                  "from chaos.probe)", mode="not_checked")
        have = f"; {len(run_losses)} of the golden run's {golden['steps']} steps are in the surviving lineage" \
            if run_losses else ""
        return _verdict(None, f"not checked: the run did not finish (it ended {run.end}{have})",
                        mode="not_checked")
    ws_changed = _world_size_changed(run, golden)
    pinned = rtol is not None
    measured = not ws_changed and not pinned
    tol = 0.0 if measured else (rtol if pinned else CHANGED_WORLD_RTOL)
    g_losses = int_losses(golden["losses"])
    cmp = compare_losses(run_losses, g_losses)
    # a print-only job's losses are as exact as it printed them: equal there is not bitwise equal
    precision = printed_precision(run_losses.values(), g_losses.values()) if run.printed else None
    as_printed = f"equal at the printed precision ({precision} decimals)" if precision is not None else None
    first_bad = cmp.first_above(tol)
    if not_finite and (first_bad is None or min(not_finite) < first_bad):
        return _verdict(False, f"diverged: the loss is not finite (NaN or inf) from step {min(not_finite)} on",
                        mode="diverged", first_divergent_step=min(not_finite), world_size_changed=ws_changed)
    details: dict[str, Any] = {
        "world_size_changed": ws_changed, "world_sizes": sorted(world_sizes),
        "golden_world_sizes": golden["world_sizes"], "steps_compared": len(cmp.steps),
        "max_abs_loss_diff": cmp.max_abs, "max_rel_loss_diff": cmp.max_rel, "tolerance_rel": tol,
        "tolerance_source": "bitwise" if measured else ("checks.loss_rtol" if pinned else "world_size_changed")}
    finished = _of(events, Ev.RUN_FINISHED)
    state = finished[-1].get("state_sha256") if finished else None
    if state is not None and state == golden.get("state_sha256"):
        return _verdict(True, "bitwise: the final model and optimizer state equal the fault-free run's",
                        mode="bitwise", **details)
    if len(cmp.steps) < golden["steps"] and (first_bad is None or measured):
        return _verdict(False, f"diverged: only {len(cmp.steps)} of the golden run's {golden['steps']} steps are in "
                               "the surviving lineage", mode="diverged", first_divergent_step=None, **details)
    if measured and cmp.max_rel > 0:
        return _against_noise(events, cmp, control, g_losses, details)
    if first_bad is not None:
        return _verdict(False, f"diverged: the loss first differs from the fault-free run's at step {first_bad} "
                               f"(relative difference {cmp.rel_at(first_bad):.3g}, tolerance {tol:g}"
                               f"{' pinned by checks.loss_rtol' if pinned else ''})",
                        mode="diverged", first_divergent_step=first_bad, **details)
    if not measured:
        if cmp.max_abs == 0 and not ws_changed and state is None:
            return _equal_losses(as_printed, precision, details, run.printed)
        why = (f"the world size changed ({sorted(world_sizes)})" if ws_changed else
               f"checks.loss_rtol pins the tolerance at {tol:g}")
        return _verdict(True, f"within_tolerance: {why}; losses within relative {tol:g} of the fault-free run's "
                              f"(at most {cmp.max_rel:.3g})", mode="within_tolerance", **details)
    if state is None:
        return _equal_losses(as_printed, precision, details, run.printed)
    return _verdict(False, "diverged: every loss matches but the final state differs from the fault-free run's",
                    mode="diverged", first_divergent_step=None, **details)


# A loss printed with at least this many significant digits is a float's whole value (repr round-trips it):
# equal as printed is then equal bitwise.
FULL_PRECISION_DIGITS = 15


def printed_precision(*series: Iterable[float]) -> int | None:
    """The decimals a print-only job printed its losses with (the most any of them shows), or None when they were
    printed whole (a float's repr: ``FULL_PRECISION_DIGITS`` significant digits or more in one of them).

    A scraped loss is the float of the printed text, whose shortest repr shows the printed digits less trailing
    zeros: the most over all losses is the printed precision (all of them ending in 0 is vanishingly rare)."""
    decimals, digits = 0, 0
    for values in series:
        for v in values:
            if not math.isfinite(v):
                continue
            exact = Decimal(repr(v)).normalize()
            _, mantissa, exponent = exact.as_tuple()
            assert isinstance(exponent, int)
            decimals, digits = max(decimals, -exponent), max(digits, len(mantissa))
    return None if digits >= FULL_PRECISION_DIGITS else decimals


def _equal_losses(as_printed: str | None, precision: int | None, details: dict[str, Any],
                  printed: bool) -> Verdict:
    """Every loss equal to the fault-free run's and no state digest to compare: ``bitwise`` when the losses are
    whole floats (the probe's, or printed whole), else equal only as far as the job printed them."""
    if as_printed is None:
        return _verdict(True, f"bitwise: every {'printed ' if printed else ''}loss matches the fault-free run's (no "
                              "state digest reported)", mode="bitwise", **details)
    return _verdict(True, f"equal_as_printed: every printed loss matches the fault-free run's, {as_printed}; not "
                          "bitwise (no state digest reported, and the printed digits hide smaller differences)",
                    mode="equal_as_printed", printed_decimals=precision,
                    **{**details, "tolerance_source": "printed_precision", "tolerance_rel": None})


def _against_noise(events: list[Event], cmp: LossComparison, control: dict[str, Any] | None,
                   golden_losses: dict[int, float], details: dict[str, Any]) -> Verdict:
    """Same world size, no pinned tolerance, losses not bitwise equal: judge them against the measured noise."""
    first_diff = cmp.first_above(0.0)
    assert first_diff is not None
    size = f"relative {cmp.max_rel:.3g} at most, first at step {first_diff} ({cmp.rel_at(first_diff):.3g})"
    details = {**details, "first_differing_step": first_diff, "band_ceiling_rel": BAND_CEILING}
    if cmp.max_rel > BAND_CEILING:
        first_bad = cmp.first_above(BAND_CEILING)
        assert first_bad is not None
        return _verdict(False, f"diverged: the loss first differs from the fault-free run's beyond any resume noise "
                               f"at step {first_bad} (relative {cmp.rel_at(first_bad):.3g}; the noise band never "
                               f"exceeds {BAND_CEILING:g}, so no control run was needed)",
                        mode="diverged", first_divergent_step=first_bad,
                        **{**details, "tolerance_rel": BAND_CEILING, "tolerance_source": "band_ceiling"})
    resume = first_resume_step(events)
    if resume is None:
        return _verdict(False, f"diverged: the loss differs from the fault-free run's ({size}) although no worker "
                               "restarted, so no resume explains it (the job is not deterministic?)",
                        mode="diverged", first_divergent_step=first_diff, **details)
    if control is None:
        return _verdict(None, f"not checked: the loss differs from the fault-free run's ({size}) and no control run "
                              "measured the noise of a clean resume (it did not run or did not finish)",
                        mode="not_checked", **details)
    if not control.get("completed") or control.get("trusted") is False:
        why = control.get("untrusted_why") or f"it did not complete (ended {control.get('end_reason')}, " \
                                               f"{control.get('run_dir')})"
        return _verdict(None, f"not checked: the loss differs from the fault-free run's ({size}), and the control run "
                              f"that measures a clean resume's noise cannot be trusted: {why}",
                        mode="not_checked", control_run=control.get("run_dir"), **details)
    return _noise_verdict(cmp, control, golden_losses, {
        **details, "control_run": control.get("run_dir"), "control_resumed_from": control.get("resumed_from"),
        "faulted_resumed_from": resume})


def _noise_verdict(cmp: LossComparison, control: dict[str, Any], golden_losses: dict[int, float],
                   details: dict[str, Any]) -> Verdict:
    """The faulted run's divergence against the band its control run's measured floor sets."""
    floor = compare_losses(int_losses(control["losses"]), golden_losses).max_rel
    tol = band(floor)
    times = (lambda x: x / floor) if floor > 0 else (lambda x: None)
    details = {**details, "tolerance_rel": tol, "tolerance_source": "measured", "noise_floor_rel": floor,
               "band_rel": tol, "times_noise_floor": times(cmp.max_rel)}
    floor_text = (f"a clean resume's measured noise floor {floor:.3g}" if floor > 0 else
                  "a clean resume measured bitwise (floor 0)")
    first_bad = cmp.first_above(tol)
    if first_bad is None:
        ratio = f", {times(cmp.max_rel):.3g}x the floor" if floor > 0 else ""
        return _verdict(True, f"within_noise: the losses differ from the fault-free run's by at most relative "
                              f"{cmp.max_rel:.3g}{ratio}, within the band {tol:.3g} set by {floor_text}",
                        mode="within_noise", **details)
    rel = cmp.rel_at(first_bad)
    ratio = f", {rel / floor:.3g}x the noise floor {floor:.3g}" if floor > 0 else f"; {floor_text}"
    return _verdict(False, f"diverged: the loss first differs from the fault-free run's beyond the noise band at step "
                           f"{first_bad} (relative {rel:.3g}{ratio}; band {tol:.3g})",
                    mode="diverged", first_divergent_step=first_bad, **details)


# ------------------------------------------------------------------------------------------ the next resume

# The job's report of a save and the storage layer's record of its first write come from two processes: the layer's
# may be stamped a little before the job's (the job reports after its open returned).
_LAYER_SLACK_S = 1.0


def _on_disk_at_end(events: list[Event]) -> dict[str, dict[str, Any]]:
    """Each checkpoint file on disk when the history ends (path -> its last state): ``whole`` (its last save
    finished), ``torn`` (a save started over it and never finished), ``empty`` (its last save finished with 0
    bytes, where saves of its kind of file had bytes) or ``damaged`` (a fault named it, or a load after its last
    save read other bytes than were saved). Deleted files and a save's temporary names (renamed away by the job's
    other saves) are not there."""
    files: dict[str, dict[str, Any]] = {}
    before: dict[str, dict[str, Any] | None] = {}  # a file's state before the save now in progress over it
    sized: set[str] = set()  # the kinds of file (numbers blanked) a save ever wrote bytes to
    source = checkpoint_source(events)
    # Where the storage layer saw bytes go (path -> times), when it watched and the job's own reports are the
    # source: an atomic writer's unfinished save went to a temporary name, never to the name the job reported.
    layer: dict[str, list[float]] = {}
    if source != Source.STORAGE:
        for e in of_kinds(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED):
            if e.get("source") == Source.STORAGE and e.get("path"):
                layer.setdefault(str(e["path"]), []).append(float(e["t"]))
    for e in of_kinds(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED, Ev.CHECKPOINT_DELETED,
                      Ev.CHECKPOINT_LOADED, Ev.FAULT_INJECTED):
        kind = e.get("event")
        if kind == Ev.FAULT_INJECTED:
            details = e.get("details") if isinstance(e.get("details"), dict) else {}
            named = ([details["path"]] if details.get("path") else []) + (
                details["paths"] if isinstance(details.get("paths"), list) else [])
            for path in map(str, named):
                if path in files:
                    which = f" #{e['fault_id']}" if e.get("fault_id") is not None else ""
                    files[path].update(state="damaged", why=f"the {e.get('kind')} fault{which} damaged it after its "
                                       "last save (its bytes no longer match its digest)")
            continue
        if e.get("source") != source or not e.get("path"):
            continue
        path = str(e["path"])
        if kind == Ev.CHECKPOINT_DELETED:
            files.pop(path, None)
        elif kind == Ev.CHECKPOINT_SAVE_STARTED:
            before[path] = files.get(path)
            files[path] = {"path": path, "step": e.get("step"), "t": e["t"], "state": "torn",
                           "why": "a save started over it and never finished (torn or partial file)"}
        elif kind == Ev.CHECKPOINT_SAVE_FINISHED:
            # 0 bytes where saves of this kind of file (numbers blanked) had bytes: cut short (an empty marker file
            # that is always empty is whole)
            pattern = _DIGITS.sub("#", path)
            empty = e.get("bytes") == 0 and pattern in sized
            if isinstance(e.get("bytes"), int) and e["bytes"] > 0:
                sized.add(pattern)
            files[path] = {"path": path, "step": e.get("step"), "t": e["t"], "sha256": e.get("sha256"),
                           "state": "empty" if empty else "whole",
                           **({"why": "its last save finished with 0 bytes"} if empty else {})}
        elif kind == Ev.CHECKPOINT_LOADED and path in files and files[path]["state"] == "whole" \
                and e.get("sha256") and files[path].get("sha256") and e["sha256"] != files[path]["sha256"]:
            files[path].update(state="damaged", why=f"a load at {e['t']:.3f} read bytes (sha256 "
                               f"{str(e['sha256'])[:12]}) other than its last save wrote (digest mismatch)")
    # a load of a name after a save over it started: the name was there (what the restart read is what it held)
    read = {str(e["path"]): float(e["t"]) for e in of_kinds(events, Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)
            if e.get("path")}
    for f in files.values():
        if f["state"] == "torn" and read.get(f["path"], -math.inf) > f["t"]:
            f["state"] = "torn_read"  # settled below: no layer evidence can make it absent
    if source != Source.STORAGE and not layer:
        for f in files.values():
            if f["state"] == "torn":  # the job said it started; nothing says where its bytes went
                f.update(state="unknown", why="its save never finished, and no storage layer watched the files to "
                         "tell whether the save was writing this name or a temporary one")
    if layer:
        for path, f in list(files.items()):
            # the job reported a save of this name that never finished, and the storage layer saw no byte written
            # to it since: the save was writing elsewhere (its temporary), so the name holds what it held before
            if f["state"] == "torn" and not any(t >= f["t"] - _LAYER_SLACK_S for t in layer.get(path, ())):
                if before.get(path) is None:
                    files.pop(path)
                else:
                    files[path] = before[path]  # type: ignore[assignment]
    for f in files.values():
        if f["state"] == "torn_read":
            f["state"] = "torn"
    temporary = _temporaries(events)
    return {p: f for p, f in files.items() if not (temporary and _DIGITS.sub("#", p) in temporary)}


def checkpoint_name(path: str, step: Any) -> str:
    """A checkpoint file as a reader knows it: its name, or ``folder/name`` where the name alone does not say the
    step (a sharded checkpoint's shard, ``it_000120/__1_0.distcp``, or a fixed name such as ``latest``)."""
    name = os.path.basename(path)
    if isinstance(step, int) and any(int(d) == step for d in re.findall(r"\d+", name)):
        return name
    return os.path.join(os.path.basename(os.path.dirname(path)), name) if os.path.dirname(path) else name


def next_resume_intact(events: list[Event]) -> Verdict:
    """The checkpoint a restart would load next, the newest on disk when the run ended, is whole: a crash during
    the job's last save that left it torn (a save that never finished, 0 bytes, bytes that match no recorded
    digest) fails with the file named, whatever the run's own steps showed (no restart came to load it)."""
    files = _on_disk_at_end(events)
    # Of the kinds the job reads back, where it ever did: a file of another kind (Ray Train's
    # checkpoint_manager_snapshot.json beside the checkpoint folders) is not what a restart would load.
    kinds = loaded_kinds(events)
    files = without_commit_file(of_file_kinds(files, kinds), commit_file(events))
    if not files:
        visible, how = loads_visible(events)
        saw = any(checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED))
        why = ("no checkpoint file was left on disk at the end (the job deleted them), so a restart would start "
               "from scratch" if saw else "no checkpoint save was seen" + ("" if visible else f" ({how})"))
        return _verdict(None, f"not checked: {why}", next_resume=None)

    def order(f: dict[str, Any]) -> tuple[int, float]:
        return (f["step"] if isinstance(f.get("step"), int) else -1, float(f["t"]))
    ranked = sorted(files.values(), key=order, reverse=True)
    top = ranked[0]
    newest_step = top.get("step")
    # the newest save set: every file of the newest step (a sharded checkpoint), else the newest file alone
    newest_set = [f for f in ranked if isinstance(newest_step, int) and f.get("step") == newest_step] or [top]
    bad = [f for f in newest_set if f["state"] != "whole"]
    whole = newest(of_file_kinds(available_at(events, math.inf), kinds))
    entry = {"path": top["path"], "step": newest_step, "state": bad[0]["state"] if bad else "whole",
             "files": len(newest_set), "newest_whole_step": whole["step"] if whole else None,
             "newest_whole_path": whole["path"] if whole else None}
    if bad and all(f["state"] == "unknown" for f in bad):
        b = bad[0]
        return _verdict(None, f"not checked: the newest checkpoint, {checkpoint_name(b['path'], b.get('step'))} (step "
                              f"{b.get('step')}): {b['why']}", next_resume=entry)
    bad = [f for f in bad if f["state"] != "unknown"]
    if bad:
        b = bad[0]
        fallback = (f"; the newest whole checkpoint is {checkpoint_name(whole['path'], whole['step'])} (step "
                    f"{whole['step']})"
                    if whole and whole["path"] != b["path"] else "; no whole checkpoint is left to fall back to")
        return _verdict(False, f"next_resume_torn: the newest checkpoint on disk at the end, "
                               f"{checkpoint_name(b['path'], b.get('step'))} (step {b.get('step')}), is {b['state']}: "
                               f"{b['why']}; a "
                               f"restart would load it{fallback}", next_resume=entry, verdict="next_resume_torn")
    return _verdict(True, f"the newest checkpoint on disk at the end, {checkpoint_name(top['path'], newest_step)} "
                          f"(step {newest_step}), is whole: a restart would resume from it", next_resume=entry)


class NextResumeIntact:
    """The newest checkpoint on disk when the run ended (what a restart would load next) is whole."""

    def check(self, history: list[Event]) -> Verdict:
        return next_resume_intact(history)


# ------------------------------------------------------------------------------------------ replay consistency

class _Replay(NamedTuple):
    """One step a later process trained again after a resume, against its first execution."""

    step: int
    first: float | None  # the loss of its first execution (None: not finite)
    again: float | None  # the loss of this execution
    process: Any  # the re-training process (its incarnation, else (node, pid))
    world_changed: bool  # the two executions ran in different world sizes (every sum in another order)
    window: tuple[float, float]  # from the first execution's process's last step to the re-training one's first


def _replays(events: list[Event]) -> tuple[list[_Replay], int]:
    """Every step rank 0 trained again in a later process, with its first execution's loss, and the number of
    rank-0 steps that recorded a loss at all.

    A step counts as trained again only in a process that started after the first execution's process had
    recorded its last step: two processes printing the same step at the same time (every rank printing, read
    without a rank) are copies of one execution, not a replay."""
    table = worker_steps(events)
    times, steps, ranks = table.values("t"), table.values("step"), table.values("rank", 0)
    incs, nodes, pids = table.values("incarnation"), table.values("node"), table.values("pid")
    losses, has_loss = table.values("loss"), table.has("loss")
    rows = [r for r in time_order(times) if ranks[r] == 0 and has_loss[r]]
    key = [incs[r] or (nodes[r], pids[r]) for r in range(len(table))] if rows else []
    first_t: dict[Any, float] = {}
    last_t: dict[Any, float] = {}
    for r in rows:
        first_t.setdefault(key[r], times[r])
        last_t[key[r]] = times[r]
    sizes = dict(zip(rows, step_world_sizes(events, rows), strict=True))
    first: dict[int, int] = {}  # step -> the row of its first execution
    out: list[_Replay] = []
    for r in rows:
        s = steps[r]
        was = first.setdefault(s, r)
        if was == r or key[was] == key[r] or last_t[key[was]] >= first_t[key[r]]:
            continue
        out.append(_Replay(s, losses[was], losses[r], key[r], sizes[was] != sizes[r],
                           (last_t[key[was]], first_t[key[r]])))
    # a progress_regex without a loss group records "loss": null on every line: those rows carry no loss
    return out, sum(losses[r] is not None for r in rows)


def _rel(a: float | None, b: float | None) -> float:
    """|b - a| / |a| (a taken as at least 1e-12); infinite when one of them is not finite and the other is."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    return abs(b - a) / max(abs(a), 1e-12)


def _resumed_from(events: list[Event], replay: _Replay, first_step: int) -> tuple[str, str | None]:
    """The checkpoint a re-training process resumed from, as words and its path (None: inferred, not seen): the
    probe's load of its incarnation, else the last load the storage layer saw between the first execution's
    process's last step and the re-training process's first."""
    if checkpoint_source(events) == Source.WORKLOAD:
        load = next((x for x in _loads_by_incarnation(events) if x["incarnation"] == replay.process), None)
    else:
        a, b = replay.window
        seen = [e for e in checkpoint_events(events, Ev.CHECKPOINT_LOADED) if a <= e["t"] <= b and e.get("path")]
        load = {"path": seen[-1]["path"], "step": seen[-1].get("step")} if seen else None
    if load is not None:
        return f"{_file_name(str(load['path']), load['step'])} (step {load['step']})", str(load["path"])
    return f"a checkpoint of step {first_step - 1} (inferred from the first step it trained)", None


def _file_name(path: str, step: Any) -> str:
    """A checkpoint file's name as a message says it: with its directory when that is the save set of its step
    (DCP's ``it_000080/__1_0.distcp``: the shard's name alone is the same in every save)."""
    parent = os.path.basename(os.path.dirname(path))
    numbered = isinstance(step, int) and step in {int(n) for n in _DIGITS.findall(parent)}
    return f"{parent}/{os.path.basename(path)}" if numbered else os.path.basename(path)


@dataclass(frozen=True)
class ReplayConsistent:
    """Steps trained twice because of a resume (the steps lost since the checkpoint) reproduce the losses of their
    first execution: a correct resume restores every state the step depends on (weights, optimizer, data order,
    RNG), so the replay differs at most by a clean resume's noise (chaos.analysis.noise). Needs no golden run: the
    run's own first execution is the reference. The tolerance is the pinned ``rtol``, else the band the control
    run's measured floor sets (``control`` with ``golden``), else BAND_CEILING, the most any clean resume's noise
    reaches; 1e-3 where the two executions ran in different world sizes; one unit of the last printed decimal
    more for printed losses."""

    rtol: float | None = None
    control: dict[str, Any] | None = None
    golden: dict[str, Any] | None = None

    def _tolerance(self) -> tuple[float, str, dict[str, Any]]:
        if self.rtol is not None:
            return self.rtol, "checks.loss_rtol", {}
        control, golden = self.control, self.golden
        if control and golden and control.get("completed") and control.get("trusted") is not False:
            floor = compare_losses(int_losses(control["losses"]), int_losses(golden["losses"])).max_rel
            return band(floor), "measured", {"noise_floor_rel": floor, "control_run": control.get("run_dir")}
        return BAND_CEILING, "band_ceiling", {}

    def check(self, history: list[Event]) -> Verdict:
        replays, with_loss = _replays(history)
        if not with_loss:
            return Verdict.not_checked("no loss was recorded (neither through chaos.probe nor in the job's printed "
                                       "progress: a progress_regex with a loss group)", mode="not_checked")
        if not replays:
            return Verdict.not_checked("no step was trained twice (no resume re-trained a step whose loss was "
                                       "recorded)", mode="not_checked", steps_retrained=0)
        valued = [r for r in replays if r.first is not None or r.again is not None]
        if not valued:  # null both times: nothing to compare, which is no evidence of equality
            return Verdict.not_checked(f"the {len(replays)} re-trained step(s) recorded no loss value either time",
                                       mode="not_checked", steps_retrained=len(replays))
        replays = valued
        tol, source, extra = self._tolerance()
        precision = printed_precision([x for r in replays for x in (r.first, r.again) if x is not None]) \
            if any(s == Source.PROGRESS for s in worker_steps(history).values("source")) else None
        unit = 10.0 ** -precision if precision is not None else 0.0

        def beyond(r: _Replay) -> bool:
            allowed = max(tol, CHANGED_WORLD_RTOL) if r.world_changed else tol
            if r.first is None or r.again is None:
                return _rel(r.first, r.again) > 0
            return abs(r.again - r.first) > allowed * max(abs(r.first), 1e-12) + unit

        rels = [_rel(r.first, r.again) for r in replays]
        details: dict[str, Any] = {
            "steps_retrained": len(replays), "retrained_steps": sorted({r.step for r in replays})[:20],
            "max_rel_loss_diff": max(rels), "tolerance_rel": tol, "tolerance_source": source, **extra,
            **({"printed_decimals": precision} if precision is not None else {})}
        bad = next((r for r in replays if beyond(r)), None)
        if bad is not None:
            mine = [r for r in replays if r.process == bad.process]
            start = min(r.step for r in mine)
            where, path = _resumed_from(history, bad, start)
            rel = _rel(bad.first, bad.again)
            return Verdict(False, f"replay_diverged: the resume from {where} trained steps again from step {start} "
                                  f"on, and step {bad.step} gave loss {bad.again!r} where its first execution gave "
                                  f"{bad.first!r} (relative {rel:.3g}, tolerance {tol:.3g} from {source}): the resume "
                                  "did not restore everything the step depends on (optimizer, scheduler, data order "
                                  "or RNG state)",
                           {**details, "mode": "diverged", "verdict": "replay_diverged",
                            "first_divergent_step": bad.step, "first_retrained_step": start,
                            "resumed_from": where, "resumed_from_path": path})
        if max(rels) == 0:
            printed = f" (as printed, {precision} decimals)" if precision is not None else ""
            return Verdict(True, f"bitwise: each of the {len(replays)} re-trained step(s) reproduced its first "
                                 f"execution's loss exactly{printed}", {**details, "mode": "bitwise"})
        said = {"band_ceiling": f"{tol:g}, the most a clean resume's noise reaches; no control run measured this "
                                "job's floor",
                "measured": f"{tol:.3g}, the band set by the control run's measured noise floor",
                "checks.loss_rtol": f"{tol:g}, pinned by checks.loss_rtol"}[source]
        return Verdict(True, f"within_noise: the {len(replays)} re-trained step(s) reproduced their first execution's "
                             f"losses within relative {max(rels):.3g} (tolerance {said})",
                       {**details, "mode": "within_noise"})


# Two completed saves of one file by different writers this close together are concurrent: each rank writing the
# same path (not a failover: a replaced worker starts in seconds, not in one save's time).
CONCURRENT_SAVE_WINDOW_S = 1.0


def _writer(e: Event) -> tuple[Any, Any]:
    return e.get("node"), e.get("pid")


def one_writer_per_file(events: list[Event]) -> Verdict:
    """No checkpoint file was saved by two writers at once with different bytes: when every rank saves to one path,
    the file keeps one rank's state and the others' is lost, whatever the loss curve shows (a script that prints no
    loss would pass every other check). Identical bytes from several ranks (replicated state) are not a clash."""
    saves = [e for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED)
             if e.get("path") and isinstance(e.get("sha256"), str)]
    if not saves:
        visible, how = loads_visible(events)
        return _verdict(None, "not checked: no completed checkpoint save with its digest was seen" +
                        ("" if visible else f" ({how})"), clashes=[])
    by_path: dict[str, list[Event]] = {}
    for e in saves:
        by_path.setdefault(str(e["path"]), []).append(e)
    clashes = []
    for path, group in by_path.items():
        group.sort(key=lambda e: float(e["t"]))
        for a, b in pairwise(group):
            if _writer(a) != _writer(b) and float(b["t"]) - float(a["t"]) <= CONCURRENT_SAVE_WINDOW_S \
                    and a["sha256"] != b["sha256"]:
                clashes.append({"path": path, "writers": [f"{a.get('node')} (pid {a.get('pid')})",
                                                          f"{b.get('node')} (pid {b.get('pid')})"],
                                "apart_s": round(float(b["t"]) - float(a["t"]), 4), "step": b.get("step")})
    if clashes:
        first = clashes[0]
        return _verdict(False, f"concurrent_writers: {first['writers'][0]} and {first['writers'][1]} both completed "
                        f"saves of {os.path.basename(first['path'])} {first['apart_s'] * 1000:.0f} ms apart, with "
                        "different bytes: the file holds one writer's state and the other's is lost (every rank "
                        f"saving to one path; save from one rank, or one file per rank){_more(clashes)}",
                        clashes=clashes, verdict="concurrent_writers")
    return _verdict(True, f"each of the {len(by_path)} checkpoint file(s) had one writer at a time "
                    f"({len(saves)} completed save(s))", clashes=[])


def _more(clashes: list[dict[str, Any]]) -> str:
    return f"; {len(clashes) - 1} more such save(s)" if len(clashes) > 1 else ""


# ------------------------------------------------------------------------------------------ the checkers

class DigestsOk:
    """Every checkpoint the job loaded was one whose save finished, with the digest recorded at save time."""

    def check(self, history: list[Event]) -> Verdict:
        return digests_ok(history)


class ResumedFromNewestValid:
    """At each restart the job loaded the newest checkpoint complete and intact at that moment."""

    def check(self, history: list[Event]) -> Verdict:
        return resumed_from_newest_valid(history)


class ExactlyOnce:
    """In the surviving lineage every sample of a complete epoch was consumed exactly once."""

    def check(self, history: list[Event]) -> Verdict:
        return exactly_once(history)


class OneWriterPerFile:
    """No checkpoint file was saved by two writers at once with different bytes (concurrent writers)."""

    def check(self, history: list[Event]) -> Verdict:
        return one_writer_per_file(history)


@dataclass(frozen=True)
class MatchesGolden:
    """The run's losses and final state against the fault-free run's summary (``golden``; None = none to compare
    with, ``no_golden_why`` says why when the scenario asked for one), with the control run's when one measured
    the noise of a clean resume. ``no_steps_why`` is set when the job recorded no step at all (a print-only job
    whose progress_regex matched nothing): there is then nothing to compare, said as such."""

    golden: dict[str, Any] | None
    rtol: float | None = None
    control: dict[str, Any] | None = None
    no_golden_why: str | None = None
    no_steps_why: str | None = None

    def check(self, history: list[Event]) -> Verdict:
        if self.golden is None and self.no_golden_why is not None:
            verdict = Verdict.not_checked(self.no_golden_why, mode="not_checked")
        else:
            verdict = matches_golden(history, self.golden, self.rtol, self.control)
        if self.no_steps_why is not None and verdict.get("mode") == "not_checked":
            return Verdict(None, f"not checked: {self.no_steps_why}", verdict.details)
        return verdict


def checkpoint_checkers(golden: dict[str, Any] | None, rtol: float | None, control: dict[str, Any] | None = None,
                        no_golden_why: str | None = None, no_steps_why: str | None = None) -> Compose:
    """The checkpoint checks result.json's ``checkpoint`` holds, in its order."""
    return Compose({
        "digests_ok": DigestsOk(),
        "resumed_from_newest_valid": ResumedFromNewestValid(),
        "matches_golden": MatchesGolden(golden, rtol, control, no_golden_why, no_steps_why),
        "exactly_once": ExactlyOnce(),
        "one_writer_per_file": OneWriterPerFile(),
        "next_resume_intact": NextResumeIntact(),
        "replay_consistent": ReplayConsistent(rtol, control, golden),
    })


def checkpoint_verdicts(events: list[Event], golden: dict[str, Any] | None, rtol: float | None,
                        control: dict[str, Any] | None = None) -> dict[str, Verdict]:
    """Each checkpoint verdict of a run (see :func:`checkpoint_checkers`)."""
    return checkpoint_checkers(golden, rtol, control).check_each(events)
