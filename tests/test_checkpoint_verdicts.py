"""Checkpoint verdicts on hand-built histories: each one shown to pass on a correct history and to fail on the
mistake it exists to catch."""

from __future__ import annotations

from typing import Any

from chaos.analysis.checkpoints import (
    digests_ok,
    exactly_once,
    golden_summary,
    matches_golden,
    one_writer_per_file,
    resumed_from_newest_valid,
)
from chaos.analysis.verdict import Verdict
from chaos.events import EndReason, Ev, Source

D, B = 8, 4  # dataset of 8 samples, global batch 4: an epoch is 2 steps


class Job:
    """A single-rank job with incarnations, checkpoints and sample ids, on a 1-second clock."""

    def __init__(self) -> None:
        self.t = 0.0
        self.events: list[dict[str, Any]] = []
        self.inc = ""

    def ev(self, event: str, **f: Any) -> Job:
        self.t += 1
        self.events.append({"t": self.t, "source": Source.WORKLOAD, "event": event, "incarnation": self.inc,
                            "rank": 0, "world_size": f.pop("world_size", 1), **f})
        return self

    def start(self, inc: str, load: int | None = None, sha: str | None = None, finished_load: bool = True) -> Job:
        self.inc = inc
        if load is not None:
            self.ev(Ev.CHECKPOINT_LOAD_STARTED, step=load, path=f"s{load}")
            if finished_load:
                self.ev(Ev.CHECKPOINT_LOADED, step=load, path=f"s{load}", sha256=sha or f"h{load}")
        return self

    def step(self, s: int, ids: list[int] | None = None, loss: float | str | None = "default", **f: Any) -> Job:
        if ids is None:
            first = ((s - 1) * B) % D
            ids = list(range(first, first + B))
        return self.ev(Ev.STEP_COMPLETED, step=s, sample_ids=ids, epoch=(s - 1) * B // D, dataset_size=D,
                       loss=1.0 / s if loss == "default" else loss, **f)

    def save(self, s: int, finish: bool = True) -> Job:
        self.ev(Ev.CHECKPOINT_SAVE_STARTED, step=s, path=f"s{s}")
        if finish:
            self.ev(Ev.CHECKPOINT_SAVE_FINISHED, step=s, path=f"s{s}", sha256=f"h{s}")
        return self

    def fault_corrupt(self, s: int) -> Job:
        self.t += 1
        # the kind's name means nothing to analysis: the damaged path and `disruptive` do
        self.events.append({"t": self.t, "source": Source.ENGINE, "event": Ev.FAULT_INJECTED, "kind": "damage",
                            "disruptive": False, "details": {"path": f"s{s}", "step": s}})
        return self

    def finish(self, s: int, state: str = "final") -> list[dict[str, Any]]:
        self.ev(Ev.RUN_FINISHED, step=s, state_sha256=state)
        self.t += 1
        self.events.append({"t": self.t, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": EndReason.COMPLETED})
        return self.events


def correct_run() -> list[dict[str, Any]]:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    j.save(4).step(5)  # crash after step 5
    j.start("b", load=4)
    for s in range(5, 9):
        j.step(s)
    return j.finish(8)


def golden() -> dict[str, Any]:
    j = Job().start("g")
    for s in range(1, 9):
        j.step(s)
    return golden_summary(j.finish(8))


def test_correct_run_passes_every_verdict() -> None:
    events = correct_run()
    assert digests_ok(events).ok
    assert resumed_from_newest_valid(events).ok
    once = exactly_once(events)
    assert once.ok and once.get("epochs_checked") == [0, 1, 2, 3]
    g = matches_golden(events, golden(), rtol=1e-3)
    assert g.ok and g.get("mode") == "bitwise"


def test_loaded_corrupt_when_bytes_differ() -> None:
    j = Job().start("a").step(1).step(2).save(2).fault_corrupt(2).step(3)
    j.start("b", load=2, sha="tampered").step(3)
    v = digests_ok(j.finish(3))
    assert v.ok is False and v.get("verdict") == "loaded_corrupt"
    assert "differ from those saved" in v.why


def test_every_rank_of_an_incarnation_must_load_the_same_bytes() -> None:
    """Each rank reports its own load. One rank that read other bytes than the others (a node-local copy) starts
    from other weights: caught and named, although the first rank's load matched the save."""
    def resumed(rank1_sha: str, rank1_path: str = "s2") -> list[dict[str, Any]]:
        j = Job().start("a").step(1).step(2).save(2).step(3)
        j.start("b", load=2)  # rank 0 loads the saved bytes
        j.ev(Ev.CHECKPOINT_LOAD_STARTED, step=2, path=rank1_path, rank=1)
        j.ev(Ev.CHECKPOINT_LOADED, step=2, path=rank1_path, sha256=rank1_sha, rank=1)
        return j.step(3).finish(3)

    assert digests_ok(resumed("h2")).ok is True
    v = digests_ok(resumed("other"))
    assert v.ok is False and v.get("verdict") == "loaded_corrupt", v
    assert "rank 1 loaded other bytes of s2 (sha256 other) than rank 0 (h2)" in v.why, v.why
    # the shards of a sharded checkpoint: each rank its own file (one name in per-rank directories), not compared
    assert digests_ok(resumed("shard1", rank1_path="rank1/s2")).ok is True


def test_loaded_corrupt_when_save_never_finished_and_load_crashed() -> None:
    j = Job().start("a").step(1).step(2).save(2).step(3).step(4).save(4, finish=False)
    j.start("b", load=4, finished_load=False)
    v = digests_ok(j.events)
    assert v.ok is False and "save never finished" in v.why


def test_resumed_from_stale() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s).save(s)
    j.start("b", load=2).step(3).step(4)
    v = resumed_from_newest_valid(j.finish(4))
    assert v.ok is False and v.get("verdict") == "resumed_from_stale"
    assert "loaded step 2 while step 4" in v.why


def test_older_checkpoint_is_fine_when_the_newest_was_corrupted() -> None:
    j = Job().start("a").step(1).save(1).step(2).save(2).fault_corrupt(2).step(3)
    j.start("b", load=1).step(2).step(3)
    assert resumed_from_newest_valid(j.finish(3)).ok


def test_lost_all_progress() -> None:
    j = Job().start("a").step(1).step(2).save(2).step(3)
    j.start("b").step(1)
    v = resumed_from_newest_valid(j.events)
    assert v.ok is False and v.get("verdict") == "lost_all_progress"


def test_off_by_one_skips_a_batch() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    j.save(4).step(5)
    j.start("b", load=4)
    for s in range(6, 9):  # resumed one step too late
        j.step(s)
    v = exactly_once(j.finish(8))
    assert v.ok is False
    assert v.get("skipped") == {2: 4} and v.get("steps_missing") == [5]


def test_reshuffle_duplicates_and_skips() -> None:
    j = Job().start("a").step(1).step(2).step(3).save(3).step(4)
    # the resumed job draws another order for step 4: epoch 1 sees 0 and 1 twice, and never 4 and 5
    j.start("b", load=3).step(4, ids=[7, 6, 0, 1])
    for s in range(5, 9):
        j.step(s)
    v = exactly_once(j.finish(8))
    assert v.ok is False and v.get("duplicates") == {1: 2} and v.get("skipped") == {1: 2}


def two_ranks(j: Job, s: int, ranks: tuple[int, ...] = (0, 1)) -> Job:
    """Step ``s`` of a 2-rank job: each rank records its half of the global batch."""
    first = ((s - 1) * B) % D
    for rank in ranks:
        half = list(range(first + rank * B // 2, first + (rank + 1) * B // 2))
        j.step(s, ids=half, rank=rank, world_size=2)
    return j


def rank_killed_after_its_step(resume_at: int) -> list[dict[str, Any]]:
    """Rank 1 OOM-killed between step 4's collective and its record (seen in CI): the checkpoint of step 4 holds its
    samples, its record never arrived; the job resumes at ``resume_at``."""
    j = Job().start("a")
    for s in range(1, 4):
        two_ranks(j, s)
    two_ranks(j, 4, ranks=(0,)).save(4)
    j.start("b", load=4)
    for s in range(resume_at, 9):
        two_ranks(j, s)
    return j.finish(8)


def test_a_record_lost_with_its_killed_rank_is_no_skip() -> None:
    v = exactly_once(rank_killed_after_its_step(5))
    assert v.ok is True, v
    assert v.get("unrecorded") == [{"step": 4, "rank": 1, "epoch": 1, "ids": 2}]
    assert v.get("missing_but_unrecorded") == {1: 2}
    assert "rank 1's step 4" in v.why


def test_a_skip_beyond_what_lost_records_can_hold_still_fails() -> None:
    v = exactly_once(rank_killed_after_its_step(6))  # resumed a step late on top of the lost record
    assert v.ok is False and v.get("skipped") == {2: 4} and v.get("steps_missing") == [5], v


def test_a_gap_in_a_rank_s_records_is_no_kill() -> None:
    """Room is only for the steps after a rank's last record in an incarnation that ended: a rank whose step 3
    is missing in the middle of its records (its data skipped) fails."""
    j = Job().start("a")
    for s in range(1, 9):
        two_ranks(j, s, ranks=(0,) if s == 3 else (0, 1))
    v = exactly_once(j.finish(8))
    assert v.ok is False and v.get("skipped") == {1: 2} and "unrecorded" not in v.details, v


def test_without_incarnations_every_rank_s_steps_count() -> None:
    """A job whose probe gives no incarnation: each rank's last execution of each step is kept (not only the last
    rank to report it), so a correct 2-rank job passes and a skip fails; no room for lost records is given."""
    j = Job().start("")
    for s in range(1, 9):
        two_ranks(j, s)
    assert exactly_once(j.finish(8)).ok is True
    j = Job().start("")
    for s in (1, 2, 3, 5, 6, 7, 8):
        two_ranks(j, s)
    two_ranks(j, 4, ranks=(0,))
    v = exactly_once(j.finish(8))
    assert v.ok is False and v.get("skipped") == {1: 2} and "unrecorded" not in v.details, v


def test_matches_golden_diverged_reports_first_step() -> None:
    j = Job().start("a")
    for s in range(1, 9):
        j.step(s, loss=1.0 / s if s < 6 else 0.5)
    v = matches_golden(j.finish(8, state="other"), golden(), rtol=1e-3)
    assert v.ok is False and v.get("mode") == "diverged" and v.get("first_divergent_step") == 6


def test_matches_golden_within_tolerance_when_world_size_changed() -> None:
    j = Job().start("a")
    for s in range(1, 9):
        j.step(s, loss=(1.0 / s) * (1 + 1e-6), world_size=2 if s > 4 else 1)
    v = matches_golden(j.finish(8, state="other"), golden(), rtol=1e-3)
    assert v.ok and v.get("mode") == "within_tolerance" and v.get("world_size_changed")
    assert 0 < v.get("max_rel_loss_diff") <= 1e-3


def test_non_finite_loss_is_divergence() -> None:
    j = Job().start("a")
    for s in range(1, 9):
        j.step(s, loss=None if s >= 7 else 1.0 / s)  # the probe writes NaN as null
    v = matches_golden(j.finish(8, state="nan"), golden(), rtol=1e-3)
    assert v.ok is False and v.get("first_divergent_step") == 7


def test_not_checked_is_said_with_a_reason() -> None:
    events = correct_run()
    v = matches_golden(events, None, rtol=1e-3)
    assert v.ok is None and v.why.startswith("not checked")
    unfinished = [e for e in events if e["event"] != Ev.RUN_FINISHED]
    assert matches_golden(unfinished, golden(), rtol=1e-3).ok is None
    # a golden run that did not complete says how it ended and where it is (a fault-free run that hung is a finding)
    hung = {**golden(), "completed": False, "end_reason": EndReason.HUNG, "run_dir": "/runs/g1"}  # as the cache has it
    v = matches_golden(events, hung, rtol=None)
    assert v.ok is None and v.why.endswith("did not complete (end_reason hung, run_dir /runs/g1)"), v.why


def test_scenario_expectations_on_checkpoint_verdicts() -> None:
    from chaos.analysis.result_json import evaluate_checkpoint_expectations
    from chaos.loading import parse_scenario

    verdicts = {"digests_ok": Verdict(True, ""), "resumed_from_newest_valid": Verdict(None, ""),
                "matches_golden": Verdict(True, "", {"mode": "within_tolerance"}), "exactly_once": Verdict(False, "")}
    strict = parse_scenario("name: s\nworkload: {name: ddp-mlp}\n"
                            "expect: {checkpoint: {matches_golden: bitwise, resumed_from_newest_valid: true}}\n")
    got = {x["name"]: x["ok"] for x in evaluate_checkpoint_expectations(strict, verdicts)}
    # bitwise required but only within tolerance; not-checked is not a pass; a failed verdict always counts
    assert got == {"checkpoint.matches_golden": False, "checkpoint.resumed_from_newest_valid": False,
                   "checkpoint.exactly_once": False}
    loose = parse_scenario("name: s\nworkload: {name: ddp-mlp}\nexpect: {checkpoint: {matches_golden: "
                           "within_tolerance}}\n")
    got = {x["name"]: x["ok"] for x in evaluate_checkpoint_expectations(loose, verdicts)}
    assert got == {"checkpoint.matches_golden": True, "checkpoint.exactly_once": False}


def test_untrusted_golden_run_is_not_a_reference() -> None:
    """A golden run that restarted itself twice is no fault-free reference: not checked, never ok or failed."""
    j = Job().start("a")
    for s in range(1, 9):
        j.step(s, loss=0.5)  # would diverge from the golden losses
    reference = {**golden(), "trusted": False, "untrusted_why": "the fault-free run restarted: 1 restart(s)"}
    v = matches_golden(j.finish(8, state="other"), reference, rtol=1e-3)
    assert v.ok is None and v.get("mode") == "not_checked" and "cannot be trusted" in v.why


def _saves_of_one_path(*saves: tuple[float, str, int, str]) -> list[dict[str, Any]]:
    """Completed saves of ``latest.pt`` through the storage layer: (t, node, pid, digest) each."""
    return [{"t": t, "source": Source.STORAGE, "event": Ev.CHECKPOINT_SAVE_FINISHED, "node": node, "pid": pid,
             "path": "/run/checkpoints/latest.pt", "sha256": sha, "step": 50} for t, node, pid, sha in saves]


def test_every_rank_saving_to_one_path_is_named_concurrent_writers_whatever_the_loss() -> None:
    """Two nodes completing saves of one file 12 ms apart with different bytes: one rank's state is lost, said as
    such (before, such a script passed unless its printed loss diverged)."""
    clash = one_writer_per_file(_saves_of_one_path((10.000, "node0", 11, "a"), (10.012, "node1", 22, "b")))
    assert clash.ok is False and clash.get("verdict") == "concurrent_writers", clash
    assert clash.why.startswith("concurrent_writers: node0 (pid 11) and node1 (pid 22) both completed saves of "
                                "latest.pt 12 ms apart, with different bytes"), clash.why


def test_one_writer_identical_replicas_and_a_later_replacement_are_not_concurrent_writers() -> None:
    one = one_writer_per_file(_saves_of_one_path((10.0, "node0", 11, "a"), (20.0, "node0", 11, "b")))
    assert one.ok is True and "had one writer at a time (2 completed save(s))" in one.why
    replicas = one_writer_per_file(_saves_of_one_path((10.0, "node0", 11, "a"), (10.01, "node1", 22, "a")))
    assert replicas.ok is True  # every rank saved the same bytes: nothing lost
    replaced = one_writer_per_file(_saves_of_one_path((10.0, "node0", 11, "a"), (25.0, "node0", 33, "b")))
    assert replaced.ok is True  # a replaced worker saving the same name seconds later is not a clash


def test_no_save_seen_is_not_checked_for_concurrent_writers() -> None:
    verdict = one_writer_per_file(correct_run()[:3])
    assert verdict.ok is None and verdict.why.startswith("not checked: no completed checkpoint save")
