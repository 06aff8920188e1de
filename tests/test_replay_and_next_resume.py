"""The run's own evidence where no golden run is needed (issue 32, items 2 and 6), on hand-built and recorded
histories: steps a resume trained again must reproduce their first execution's losses (``replay_consistent``), and
the checkpoint a restart would load next must be whole (``next_resume_intact``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.checkpoints import checkpoint_verdicts
from chaos.analysis.run import analyze
from chaos.events import Ev, Source
from chaos.loading import load_scenario
from tests.data.recorded import expand, recorded_names
from tests.test_checkpoint_verdicts import Job
from tests.test_verdict_precision import printed


def verdicts(events: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return checkpoint_verdicts(events, kw.get("golden"), kw.get("rtol"), kw.get("control"))


# ------------------------------------------------------------------------------------------ replay consistency

def resumed(losses_again: dict[int, float]) -> list[dict[str, Any]]:
    """Steps 1-6 (a save at 4), a crash, a resume from step 4 re-training 5 and 6 with ``losses_again``."""
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    j.save(4).step(5).step(6)
    j.start("b", load=4)
    for s in range(5, 9):
        j.step(s, loss=losses_again.get(s, 1.0 / s))
    return j.finish(8)


def test_retrained_steps_that_reproduce_their_losses_pass_bitwise() -> None:
    v = verdicts(resumed({}))["replay_consistent"]
    assert v.ok is True and v.get("mode") == "bitwise" and v.get("steps_retrained") == 2, v
    assert v.get("retrained_steps") == [5, 6]


def test_a_retrained_step_that_differs_names_the_step_and_the_checkpoint() -> None:
    v = verdicts(resumed({6: 0.2}))["replay_consistent"]  # first execution 1/6: the optimizer state was lost
    assert v.ok is False and v.get("verdict") == "replay_diverged", v
    assert v.get("first_divergent_step") == 6 and v.get("first_retrained_step") == 5
    assert v.get("resumed_from_path") == "s4"
    assert "from s4 (step 4)" in v.why and "step 6 gave loss 0.2" in v.why and "band_ceiling" in v.why
    # a resume's noise (stock DDP: ~1e-7 relative) is no divergence, without any golden or control run
    v = verdicts(resumed({6: (1.0 / 6) * (1 + 2e-7)}))["replay_consistent"]
    assert v.ok is True and v.get("mode") == "within_noise" and v.get("tolerance_source") == "band_ceiling", v
    # a pinned tolerance is the one used, and said
    v = verdicts(resumed({6: (1.0 / 6) * (1 + 2e-7)}), rtol=1e-8)["replay_consistent"]
    assert v.ok is False and v.get("tolerance_source") == "checks.loss_rtol", v


def test_no_retrained_step_or_no_loss_is_not_checked() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    j.save(4)
    j.start("b", load=4)  # resumed exactly where it stopped: nothing trained twice
    for s in range(5, 7):
        j.step(s)
    v = verdicts(j.finish(6))["replay_consistent"]
    assert v.ok is None and v.why.startswith("not checked: no step was trained twice"), v
    j = Job().start("a")
    for s in range(1, 3):
        j.step(s, loss=None)
    for e in j.events:
        e.pop("loss", None)
    v = verdicts(j.finish(2))["replay_consistent"]
    assert v.ok is None and v.why.startswith("not checked: no loss was recorded"), v


def test_a_progress_regex_without_a_loss_group_is_not_checked_not_bitwise() -> None:
    """Every printed line records "loss": null (the tutorial's epoch lines print none): steps trained twice are no
    evidence of equal losses (byo epoch-off-by-one said "ok (bitwise) ... as printed, 0 decimals")."""
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s, loss=None)
    j.save(2).step(5, loss=None)
    j.start("b", load=2)
    for s in range(3, 7):
        j.step(s, loss=None)
    v = verdicts(j.finish(6))["replay_consistent"]
    assert v.ok is None and v.why.startswith("not checked: no loss was recorded"), v


def test_every_rank_printing_the_same_step_is_no_replay() -> None:
    events = printed({s: 1.0 / s for s in range(1, 6)})
    # node1's log prints the same lines at the same moments: copies of one execution, not a second one
    copies = [{**e, "node": "node1", "pid": "node1:1", "loss": 0.5}
              for e in events if e["event"] in (Ev.STEP_COMPLETED, Ev.PROCESS_STARTED)]
    events = sorted(events + copies, key=lambda e: e["t"])
    v = verdicts(events)["replay_consistent"]
    assert v.ok is None and "no step was trained twice" in v.why, v


def test_printed_losses_differ_by_a_printed_digit_within_noise() -> None:
    first = {s: round(0.01 + 1.0 / (100 * s), 4) for s in range(1, 11)}
    events = printed(first)
    # a second process re-prints steps 6-10 after the first ended; step 7's last printed digit moved by one
    t = events[-2]["t"] + 5
    events.insert(-1, {"t": t, "source": Source.PROGRESS, "event": Ev.PROCESS_STARTED, "node": "node0",
                       "pid": "node0:2"})
    for s in range(6, 11):
        loss = first[s] + (0.0001 if s == 7 else 0.0)
        events.insert(-1, {"t": t + s, "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED, "node": "node0",
                           "pid": "node0:2", "step": s, "loss": round(loss, 4)})
    events[-1]["t"] = t + 20
    v = verdicts(events)["replay_consistent"]
    assert v.ok is True and v.get("printed_decimals") == 4, v


def test_a_print_only_replay_names_the_file_the_storage_layer_saw_loaded() -> None:
    events = printed({s: 1.0 / s for s in range(1, 11)})
    t = events[-2]["t"] + 5
    later = [{"t": t, "source": Source.STORAGE, "event": Ev.CHECKPOINT_LOADED, "node": "node0", "pid": 4242,
              "path": "/ck/ckpt_5.pt", "step": 5, "sha256": "a", "bytes": 9},
             {"t": t + 0.5, "source": Source.PROGRESS, "event": Ev.PROCESS_STARTED, "node": "node0", "pid": "node0:2"}]
    later += [{"t": t + s, "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED, "node": "node0", "pid": "node0:2",
               "step": s, "loss": 1.0 / s if s < 8 else 0.5} for s in range(6, 11)]
    events = events[:-1] + later + [{**events[-1], "t": t + 20}]
    v = verdicts(events)["replay_consistent"]
    assert v.ok is False and v.get("first_divergent_step") == 8 and v.get("first_retrained_step") == 6, v
    assert v.get("resumed_from_path") == "/ck/ckpt_5.pt" and "the resume from ckpt_5.pt (step 5)" in v.why, v
    # a shard of a sharded save is named with its save set's directory (its own name is the same in every save)
    for e in events:
        if e["event"] == Ev.CHECKPOINT_LOADED:
            e["path"] = "/run-2026/ck/it_000005/__1_0.distcp"
    assert "the resume from it_000005/__1_0.distcp (step 5)" in verdicts(events)["replay_consistent"].why


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    into = tmp_path_factory.mktemp("recorded")
    return {name: analyze(expand(name, into)) for name in recorded_names()}


def test_the_recorded_planted_bug_fails_replay_and_correct_runs_do_not(recorded: dict[str, dict[str, Any]]) -> None:
    bug = recorded["plain-ddp-no-optimizer-state"]["checkpoint"]["replay_consistent"]
    assert bug["ok"] is False and bug["first_divergent_step"] == 102 and bug["first_retrained_step"] == 101, bug
    assert "a checkpoint of step 100" in bug["why"]
    # stock DDP's resume noise (~2e-7 here) within the control run's measured band
    ok = recorded["plain-ddp-crash"]["checkpoint"]["replay_consistent"]
    assert ok["ok"] is True and ok["mode"] == "within_noise" and ok["tolerance_source"] == "measured", ok
    for name, result in recorded.items():
        if name != "plain-ddp-no-optimizer-state":
            assert result["checkpoint"]["replay_consistent"]["ok"] is not False, (name, result["checkpoint"])


# ------------------------------------------------------------------------------------------ the next resume

def _layer_saw(j: Job, path: str, step: int) -> Job:
    """The storage layer's record of bytes going to ``path`` (it stamps its own events, just after the job's)."""
    j.events.append({"t": j.t + 0.1, "source": Source.STORAGE, "event": Ev.CHECKPOINT_SAVE_STARTED, "path": path,
                     "step": step})
    return j


def test_a_torn_newest_checkpoint_at_the_end_fails_with_the_file_named() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    _layer_saw(j.save(2), "s2", 2)
    _layer_saw(j.save(4, finish=False), "s4", 4)  # the last save, writing s4 itself, never finished (a crash)
    v = verdicts(j.finish(4))["next_resume_intact"]
    assert v.ok is False and v.get("verdict") == "next_resume_torn", v
    assert "s4 (step 4), is torn" in v.why and "newest whole checkpoint is s2 (step 2)" in v.why
    assert v.get("next_resume")["newest_whole_step"] == 2


def test_an_atomic_save_cut_short_leaves_the_previous_checkpoint_whole() -> None:
    """A stalled fsync stops the save of step 4 inside its temporary file (measured: storage/fsync-stall-hangs):
    the name the job reported was never written, so a restart loads s2, which is whole (no false alarm)."""
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    _layer_saw(j.save(2), ".s2.tmp", 2)
    _layer_saw(j.save(4, finish=False), ".s4.tmp", 4)
    v = verdicts(j.finish(4))["next_resume_intact"]
    assert v.ok is True and "s2 (step 2), is whole" in v.why, v


def test_an_unfinished_save_no_layer_watched_is_not_checked() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    v = verdicts(j.save(2).save(4, finish=False).finish(4))["next_resume_intact"]
    assert v.ok is None and "no storage layer watched the files" in v.why, v


def test_an_empty_or_damaged_newest_checkpoint_fails() -> None:
    j = Job().start("a").step(1)
    j.ev(Ev.CHECKPOINT_SAVE_STARTED, step=1, path="s1")
    j.ev(Ev.CHECKPOINT_SAVE_FINISHED, step=1, path="s1", sha256="h1", bytes=9)
    j.ev(Ev.CHECKPOINT_SAVE_STARTED, step=2, path="s2")
    j.ev(Ev.CHECKPOINT_SAVE_FINISHED, step=2, path="s2", sha256="e3b0", bytes=0)
    v = verdicts(j.finish(2))["next_resume_intact"]
    assert v.ok is False and "is empty: its last save finished with 0 bytes" in v.why, v
    # a marker file that is always empty is whole
    j = Job().start("a").step(1)
    for s in (1, 2):
        j.ev(Ev.CHECKPOINT_SAVE_STARTED, step=s, path=f"done_{s}")
        j.ev(Ev.CHECKPOINT_SAVE_FINISHED, step=s, path=f"done_{s}", sha256="e3b0", bytes=0)
    assert verdicts(j.finish(2))["next_resume_intact"].ok is True
    v = verdicts(Job().start("a").step(1).save(1).fault_corrupt(1).finish(1))["next_resume_intact"]
    assert v.ok is False and "is damaged" in v.why and "no whole checkpoint is left" in v.why, v


def test_a_whole_newest_checkpoint_passes_and_none_seen_is_not_checked() -> None:
    j = Job().start("a")
    for s in range(1, 5):
        j.step(s)
    v = verdicts(j.save(2).save(4).finish(4))["next_resume_intact"]
    assert v.ok is True and "s4 (step 4), is whole" in v.why, v
    v = verdicts(Job().start("a").step(1).finish(1))["next_resume_intact"]
    assert v.ok is None and v.why.startswith("not checked"), v


def test_the_recorded_torn_save_is_named_at_the_end(recorded: dict[str, dict[str, Any]]) -> None:
    v = recorded["non-atomic-save"]["checkpoint"]["next_resume_intact"]
    assert v["ok"] is False and "step_00000150.pt (step 150), is torn" in v["why"], v
    for name in ("quickstart", "centralized-crash", "corrupt-latest-checkpoint"):
        assert recorded[name]["checkpoint"]["next_resume_intact"]["ok"] is True, name


def test_a_scenario_can_require_the_two_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {name: ddp-mlp}\nfaults: []\n"
                    "expect: {checkpoint: {next_resume_intact: true, replay_consistent: true}}\n")
    wanted = load_scenario(path).expect.checkpoint
    assert wanted.next_resume_intact is True and wanted.replay_consistent is True


def test_a_checkpoint_is_named_as_a_reader_knows_it() -> None:
    """A shard's own name says nothing of its checkpoint (the byo DCP runs named `__1_0.distcp`): its folder is
    named with it; a name that carries the step stays alone."""
    from chaos.analysis.checkpoints import checkpoint_name

    assert checkpoint_name("/r/ckpt/it_000120/__1_0.distcp", 120) == "it_000120/__1_0.distcp"
    assert checkpoint_name("/r/ckpt/ckpt_300.pt", 300) == "ckpt_300.pt"
    assert checkpoint_name("/r/ckpt/snapshot.pt", 14) == "ckpt/snapshot.pt"
    assert checkpoint_name("latest", None) == "latest"
