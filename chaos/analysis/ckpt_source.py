"""Which checkpoint events a run's verdicts and metrics read: the probe's, or the storage layer's (never both).

A job that reports its checkpoints through ``chaos.probe`` (the shipped workload) is also seen by the storage layer
when one serves its checkpoint directory: the same save would then count twice, once with the job's step and once
with the file's. The job's own account decides (docs/design.md, "The storage layer"); a script that never imports
``chaos`` is judged from the storage layer's events. Every verdict and metric that reads checkpoint events asks
:func:`checkpoint_events`, so they all read the same source.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from chaos.analysis.load import memo, of_kind, of_kinds, step_table
from chaos.events import Ev, Source
from chaos.history import Event
from chaos.step_names import blank_timestamps

CHECKPOINT_EVENTS = (Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_WRITE_PROGRESS, Ev.CHECKPOINT_SAVE_FINISHED,
                     Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED, Ev.CHECKPOINT_DELETED,
                     Ev.CHECKPOINT_REJECTED)


def checkpoint_source(events: list[Event]) -> Source | None:
    """``workload`` when the job reported any checkpoint event through the probe, else ``storage`` when the storage
    layer recorded any, else None (nothing about checkpoints is known)."""
    def compute() -> Source | None:
        sources = {e.get("source") for kind in CHECKPOINT_EVENTS for e in of_kind(events, kind)}
        if Source.WORKLOAD in sources:
            return Source.WORKLOAD
        return Source.STORAGE if Source.STORAGE in sources else None
    return memo(events, "checkpoint_source", compute)


def checkpoint_events(events: list[Event], *kinds: Ev) -> list[Event]:
    """The checkpoint events of ``kinds`` from the chosen source, in time order."""
    def compute() -> list[Event]:
        source = checkpoint_source(events)
        return [e for e in of_kinds(events, *kinds) if e.get("source") == source] if source else []
    return memo(events, "checkpoint_events:" + ",".join(kinds), compute)


def run_environment(events: list[Event]) -> dict[str, Any]:
    """``run_started``'s ``environment`` (empty when the history has none)."""
    started = of_kind(events, Ev.RUN_STARTED)
    environment: Any = started[0].get("environment") if started else None
    return environment if isinstance(environment, dict) else {}


def storage_layer(events: list[Event]) -> str | None:
    """``environment.storage_layer`` of ``run_started``: ``fuse``, ``inotify``, ``off``, or None (not recorded)."""
    layer = run_environment(events).get("storage_layer")
    return layer if isinstance(layer, str) else None


def loads_visible(events: list[Event]) -> tuple[bool, str]:
    """Whether the history can show the checkpoints the job loaded, and why (the reason a verdict is not checked).

    The probe reports the job's own loads; the storage layer sees reads only when it serves the directory through
    FUSE (its inotify fallback sees files appear, not being read).
    """
    source = checkpoint_source(events)
    if source == Source.WORKLOAD:
        return True, "the job reports its checkpoints through chaos.probe"
    layer = storage_layer(events)
    if layer == "fuse" or any(e.get("source") == Source.STORAGE for e in of_kind(events, Ev.CHECKPOINT_LOADED)):
        return True, "the storage layer saw every read of the checkpoint directory"
    if layer == "inotify":
        # histories before storage_layer_why fell back to inotify only for a machine without FUSE
        why = run_environment(events).get("storage_layer_why") or "no /dev/fuse or libfuse3"
        return False, f"the storage layer ran as an inotify watcher ({why}): it sees files saved, not files read"
    if layer == "off":
        return False, ("no storage layer served the checkpoint directory (storage_layer: off) and the job reports "
                       "no checkpoint through chaos.probe")
    if any(e.get("source") == Source.WORKLOAD for e in of_kind(events, Ev.PROCESS_STARTED)):
        return False, ("the job reported no checkpoint save or load through chaos.probe and no storage layer "
                       "recorded its checkpoint files")
    if not of_kind(events, Ev.PROCESS_STARTED) and not len(step_table(events)):
        # Nothing of the job ran: saying it "reports no checkpoint" would blame a job that never got the chance.
        what = "training process" if of_kind(events, Ev.NODE_STARTED) else "node"
        return False, f"no {what} of the job ever started, so it saved and loaded no checkpoint that could be seen"
    return False, ("the job reports no checkpoint through chaos.probe and no storage layer recorded its "
                   "checkpoint files")


def _replay(events: list[Event], t: float, changed: Callable[[str, dict[str, Any] | None], None] | None = None,
            ) -> dict[str, dict[str, Any]]:
    """The checkpoint files complete and intact at time ``t`` (path -> its save), ``changed(path, save or None)``
    called at every change on the way."""
    available: dict[str, dict[str, Any]] = {}
    source = checkpoint_source(events)

    def drop(path: str) -> None:
        if available.pop(path, None) is not None and changed is not None:
            changed(path, None)

    for e in of_kinds(events, Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED, Ev.CHECKPOINT_DELETED,
                      Ev.FAULT_INJECTED):
        if e["t"] >= t:
            break
        kind = e.get("event")
        if kind == Ev.FAULT_INJECTED:
            if isinstance(e.get("details"), dict):
                # Any fault kind (a plug-in too) names the checkpoint files it damaged or removed: `path` or `paths`.
                damaged = e["details"].get("paths")
                for path in ([e["details"]["path"]] if e["details"].get("path") else []) + (
                        damaged if isinstance(damaged, list) else []):
                    drop(str(path))
        elif e.get("source") != source:
            continue
        elif kind == Ev.CHECKPOINT_SAVE_FINISHED:
            available[e["path"]] = {"step": e.get("step"), "sha256": e.get("sha256"), "path": e["path"], "t": e["t"]}
            if changed is not None:
                changed(e["path"], available[e["path"]])
        else:  # save started (being overwritten: not complete until it finishes again) or deleted
            drop(e["path"])
    return available


_DIGITS = re.compile(r"\d+")


def file_kind(path: str) -> str:
    """A checkpoint file's kind: its path with dates, times and numbers blanked (``ckpt_#.pt``,
    ``checkpoint__/model.pt``), so every save of one series has one kind."""
    return _DIGITS.sub("#", blank_timestamps(str(path)))


def loaded_kinds(events: list[Event]) -> frozenset[str]:
    """The kinds of file any process of the run read back as a checkpoint (of the chosen source)."""
    return memo(events, "loaded_kinds", lambda: frozenset(
        file_kind(str(e["path"])) for e in checkpoint_events(events, Ev.CHECKPOINT_LOADED) if e.get("path")))


def of_file_kinds(files: dict[str, dict[str, Any]], kinds: frozenset[str]) -> dict[str, dict[str, Any]]:
    """The files of those kinds (path -> entry); all of them when none is (a job that never loaded anything, or
    loaded only files no longer there)."""
    return {p: f for p, f in files.items() if file_kind(p) in kinds} or files


def _save_set(path: str, step: Any) -> tuple[str, int] | None:
    """The save a file belongs to: its directory and step (a sharded checkpoint is several files of one step in one
    directory: DCP's ``it_80/{__0_0.distcp, __1_0.distcp, .metadata}``, ``model_80.pt`` beside ``optim_80.pt``)."""
    return (posixpath.dirname(str(path)), step) if isinstance(step, int) else None


def _temporaries(events: list[Event]) -> frozenset[str]:
    """The kinds of path (numbers blanked) the job renamed away (``ckpt_#.pt.tmp`` -> ``ckpt_#.pt``, DCP's
    ``.metadata.tmp``): a save's temporary name, not a checkpoint, also where a crash left one unrenamed. In no
    save set: beside the old file of the same step that a restarted job saves again, it would double the set's
    size and no single-file save would ever count as whole."""
    def compute() -> frozenset[str]:
        renamed = [e["path"] for e in checkpoint_events(events, Ev.CHECKPOINT_DELETED) if e.get("renamed_to")]
        renamed += [e["renamed_from"] for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED)
                    if isinstance(e.get("renamed_from"), str)]
        return frozenset(_DIGITS.sub("#", str(path)) for path in renamed)
    return memo(events, "temporaries", compute)


def _temporary(path: str, kinds: frozenset[str]) -> bool:
    return bool(kinds) and _DIGITS.sub("#", path) in kinds


def save_set_sizes(events: list[Event]) -> dict[str, int]:
    """For each kind of save set (its directory with the numbers blanked: ``ckpt/it_#``), the most files one set
    of that kind ever held at once in this history: how many files make a whole save of the job."""
    def compute() -> dict[str, int]:
        members: dict[tuple[str, int], set[str]] = {}
        set_of: dict[str, tuple[str, int]] = {}  # file -> the save set it is in now
        sizes: dict[str, int] = {}
        temporary = _temporaries(events)

        def changed(path: str, save: dict[str, Any] | None) -> None:
            if (was := set_of.pop(path, None)) is not None:
                members[was].discard(path)
            key = _save_set(path, save["step"]) if save is not None and not _temporary(path, temporary) else None
            if key is not None:
                set_of[path] = key
                files = members.setdefault(key, set())
                files.add(path)
                kind = _DIGITS.sub("#", key[0])
                sizes[kind] = max(sizes.get(kind, 0), len(files))

        _replay(events, float("inf"), changed)
        return sizes
    return memo(events, "save_set_sizes", compute)


def available_at(events: list[Event], t: float) -> dict[str, dict[str, Any]]:
    """Checkpoints complete and intact at time ``t``: saves finished (of the chosen source), minus those being
    overwritten (a later save started), deleted, or named damaged by a fault (``details.path`` / ``paths``), and
    minus the files of a save set that is not whole (fewer files than the job's whole saves of that kind held,
    :func:`save_set_sizes`: one finished shard of a sharded save a crash cut short is not a checkpoint)."""
    available = _committed(events, _replay(events, t), t)
    sizes, temporary = save_set_sizes(events), _temporaries(events)
    counts: dict[tuple[str, int], int] = {}
    for path, entry in available.items():
        key = _save_set(path, entry["step"])
        if key is not None and not _temporary(path, temporary):
            counts[key] = counts.get(key, 0) + 1
    return {path: entry for path, entry in available.items()
            if (key := _save_set(path, entry["step"])) is None
            or counts.get(key, 0) >= sizes.get(_DIGITS.sub("#", key[0]), 1)}


def commit_file(events: list[Event]) -> str | None:
    """The file the job's framework rewrites when it commits a checkpoint it would resume from (the plan's
    ``checkpoint_commit_file``, its launcher's: Ray Train's ``checkpoint_manager_snapshot.json``); None: a
    checkpoint is resumable once its save finished."""
    started = of_kind(events, Ev.RUN_STARTED)
    plan = started[0].get("plan") if started else None
    name = plan.get("checkpoint_commit_file") if isinstance(plan, dict) else None
    return name if isinstance(name, str) and name else None


def _committed(events: list[Event], available: dict[str, dict[str, Any]], t: float) -> dict[str, dict[str, Any]]:
    """Of the checkpoints whole at ``t``, those a restart could load: under a framework that commits checkpoints
    (a commit file), the ones a save of the commit file followed before ``t``, without the commit file itself (its
    bookkeeping, not a checkpoint). Ray Train resumes from its newest committed checkpoint; one reported and whole
    on disk when the fault hit, but not yet committed at the controller's next poll, is not one it passed over (a
    plain script judged on files alone failed as stale for Ray's commit lag). A history that shows no save of the
    commit file (a layer that did not see it) is judged on the files alone, as before."""
    name = commit_file(events)
    if name is None:
        return available
    commits = [e["t"] for e in of_kind(events, Ev.CHECKPOINT_SAVE_FINISHED)
               if e["t"] < t and posixpath.basename(str(e.get("path", ""))) == name]
    if not commits:
        return available
    last = max(commits)
    return {path: entry for path, entry in without_commit_file(available, name).items() if entry["t"] <= last}


def without_commit_file(files: dict[str, dict[str, Any]], name: str | None) -> dict[str, dict[str, Any]]:
    """The files (path -> entry) other than the framework's commit file ``name`` (its bookkeeping, not a
    checkpoint a restart loads); all of them when there is none."""
    return files if name is None else {p: f for p, f in files.items() if posixpath.basename(p) != name}


def newest(available: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The available checkpoint of the highest known step (a save whose step is unknown cannot be ranked)."""
    return max((c for c in available.values() if isinstance(c.get("step"), int)), key=lambda c: c["step"],
               default=None)
