"""Checkpoint verdicts on real print-only histories (tests/byo/ddp_snapshot.py under the FUSE storage layer),
recorded by tests/integration/test_bring_your_own.py-style runs, and on broken copies of them.

- ``crash-at-step``: 2 nodes, node 1 killed after step 170; the restarted round (rank 0 now on node 1) read
  ``snapshot.pt`` (step 150) on both ranks and printed step 151.
- ``crash-on-save-started``: 1 node killed while ``torch.save`` rewrote ``snapshot.pt`` in place (held at its first
  write); the replacement read the file that save never finished and trained on.
- ``crash-loop-damaged``: 1 node killed after step 20, its snapshot truncated while it was down: a crash loop.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.checkpoints import checkpoint_verdicts, restart_loop_cause
from chaos.analysis.load import load_events
from chaos.analysis.metrics import fault_metrics, worker_restarts
from chaos.events import Ev

DATA = Path(__file__).parent / "data" / "print_only"


def recorded(name: str) -> list[dict[str, Any]]:
    with gzip.open(DATA / f"{name}.events.jsonl.gz", "rt") as f:
        return sorted((json.loads(line) for line in f), key=lambda e: e["t"])


def loaded(events: list[dict[str, Any]], tmp_path: Path) -> Any:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return load_events(path)


@pytest.fixture
def crash() -> list[dict[str, Any]]:
    return recorded("crash-at-step")


def verdicts(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The checkpoint verdicts as result.json spells them."""
    return {name: v.to_dict() for name, v in checkpoint_verdicts(events, None, 1e-3).items()}


def test_the_real_print_only_resume_passes(crash: list[dict[str, Any]], tmp_path: Path) -> None:
    history = loaded(crash, tmp_path)
    assert history.unreadable.count == 0
    v = verdicts(history)
    assert v["digests_ok"]["ok"] is True and len(v["digests_ok"]["loads"]) == 2  # both ranks read it
    [restart] = v["resumed_from_newest_valid"]["restarts"]
    assert v["resumed_from_newest_valid"]["ok"] is True
    assert restart["loaded_step"] == restart["newest_valid_step"] == 150 and restart["first_step_after"] == 151
    assert v["exactly_once"]["ok"] is None and "resumed at step 151" in v["exactly_once"]["why"]
    [fault] = fault_metrics(history)
    assert fault.resumed_from == 150 and fault.lost_steps == 20
    assert fault.resume_evidence is not None and fault.resume_evidence.endswith("snapshot.pt")
    assert worker_restarts(history) == 1


def test_the_same_history_without_its_loads_lost_all_progress(crash: list[dict[str, Any]]) -> None:
    events = [e for e in crash if e["event"] != Ev.CHECKPOINT_LOADED]
    v = verdicts(events)["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "lost_all_progress" and "snapshot.pt (step 150)" in v["why"]


def test_the_same_history_resumed_two_steps_early_trained_twice(crash: list[dict[str, Any]]) -> None:
    events = copy.deepcopy(crash)
    for e in events:  # the restarted round's steps, as if it had printed 149, 150, ... after loading step 150
        if e["event"] == Ev.STEP_COMPLETED and e["pid"] == "node1:1":
            e["step"] -= 2
    v = verdicts(events)["exactly_once"]
    assert v["ok"] is False and v["steps_trained_twice"] == [149, 150], v


def test_the_same_history_with_other_bytes_read_is_corrupt(crash: list[dict[str, Any]]) -> None:
    events = copy.deepcopy(crash)
    next(e for e in events if e["event"] == Ev.CHECKPOINT_LOADED)["sha256"] = "0" * 64
    v = verdicts(events)["digests_ok"]
    assert v["ok"] is False and "differ from those saved" in v["why"]


def test_a_load_of_a_save_that_never_finished_is_flagged(tmp_path: Path) -> None:
    """The crash landed in the save; the file held whole bytes by luck (one 2 KB write), but no save finished with
    them: the job resumed from an unverified file, which its non-atomic save makes a real bug."""
    events = recorded("crash-on-save-started")
    v = verdicts(loaded(events, tmp_path))
    assert v["digests_ok"]["ok"] is False
    assert "snapshot.pt" in v["digests_ok"]["why"] and "never finished" in v["digests_ok"]["why"]
    # the new round's rank 0 read the file and then saved: its read is still this restart's load
    [restart] = v["resumed_from_newest_valid"]["restarts"]
    assert restart["loaded_path"].endswith("snapshot.pt") and restart["loaded_step"] == 10


def test_a_real_crash_loop_on_a_damaged_snapshot_counts_its_rounds_and_names_the_file(tmp_path: Path) -> None:
    """``crash-loop-damaged``: the node crashed after step 20 and its snapshot was truncated while it was down;
    every restarted worker died loading it. The engine recorded each round from torchrun's failure lines and the
    storage layer's loads (5 rounds before it called the restart loop)."""
    history = loaded(recorded("crash-loop-damaged"), tmp_path)
    assert worker_restarts(history) == 5
    cause = restart_loop_cause(history)
    assert cause is not None and "5 worker process(es) loaded snapshot.pt (step 20)" in cause
    assert "differ from those saved (corrupted on storage)" in cause
    [end] = [e for e in history if e["event"] == Ev.RUN_ENDED]
    assert end["reason"] == "restart_loop" and "failed finding central directory" in end["why"]
