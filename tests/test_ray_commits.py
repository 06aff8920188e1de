"""Ray Train resumes only from the checkpoints its controller committed: the restart verdict counts a checkpoint as
one the job passed over only once a save of the launcher's commit file (``checkpoint_manager_snapshot.json``)
followed it (``chaos.analysis.ckpt_source``, the plan's ``checkpoint_commit_file``).

The history: a real run of examples/byo/ray-plain-worker-crash.yaml in the whole matrix (2026-12-06 20:49 UTC, run
``20261206-204944-byo-ray-plain-worker-crash-a2f6f1``). The kill landed 82 ms after the save of the folder
``checkpoint_..._20-50-19.107224`` and before the controller's next poll committed it: the new worker group
resumed from ``..._20-50-18.574477``, the newest committed, and the folder that was never committed stayed on disk
after the run (Ray deletes only what it committed). Judged on files alone, this correct script failed as stale.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.checkpoints import checkpoint_verdicts
from chaos.events import Ev

DATA = Path(__file__).parent / "data" / "print_only"
COMMIT_FILE = "checkpoint_manager_snapshot.json"
COMMITTED, NOT_COMMITTED, OLDER = "20-50-18.574477/model.pt", "20-50-19.107224/model.pt", "20-50-17.236993/model.pt"


@pytest.fixture
def history() -> list[dict[str, Any]]:
    """The recorded history, its plan naming Ray's commit file as a plan made today does (it was recorded just
    before the plan said it)."""
    with gzip.open(DATA / "ray-commit-lag.events.jsonl.gz", "rt") as f:
        events = sorted((json.loads(line) for line in f), key=lambda e: e["t"])
    [started] = [e for e in events if e["event"] == Ev.RUN_STARTED]
    assert started["plan"]["launcher"] == "ray" and "checkpoint_commit_file" not in started["plan"]
    started["plan"]["checkpoint_commit_file"] = COMMIT_FILE
    return events


def resumed(events: list[dict[str, Any]]) -> dict[str, Any]:
    return checkpoint_verdicts(events, None, 1e-3)["resumed_from_newest_valid"].to_dict()


def test_a_checkpoint_ray_never_committed_is_not_one_the_restart_passed_over(history: list[dict[str, Any]]) -> None:
    v = resumed(history)
    assert v["ok"] is True, v
    [restart] = v["restarts"]
    assert restart["loaded_path"].endswith(COMMITTED) and restart["newest_valid_path"].endswith(COMMITTED)
    assert restart["first_step_after"] == 12


def test_judged_on_files_alone_the_same_history_looks_stale(history: list[dict[str, Any]]) -> None:
    """What the plan's commit file changes: without it (a launcher that commits nothing) the newest whole folder
    is the one never committed, and the correct script fails."""
    for e in history:
        if e["event"] == Ev.RUN_STARTED:
            del e["plan"]["checkpoint_commit_file"]
    v = resumed(history)
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale", v
    assert v["restarts"][0]["newest_valid_path"].endswith(NOT_COMMITTED)


def test_a_restart_from_an_older_committed_checkpoint_still_fails_as_stale(history: list[dict[str, Any]]) -> None:
    """The commit file narrows what counts, never excuses a real stale resume: the same restart loading the
    committed checkpoint before the newest committed one fails."""
    events = copy.deepcopy(history)
    [older] = [e for e in events if e["event"] == Ev.CHECKPOINT_SAVE_FINISHED and e["path"].endswith(OLDER)]
    for e in events:
        if e["event"] == Ev.CHECKPOINT_LOADED:
            e.update(path=older["path"], sha256=older["sha256"], step=older["step"])
    v = resumed(events)
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale", v
    [restart] = v["restarts"]
    assert restart["loaded_path"].endswith(OLDER) and restart["newest_valid_path"].endswith(COMMITTED)
