"""Checkpoint verdicts for a script that never imports chaos, judged from the storage layer's events.

The histories follow the contract (docs/storage.md) line by line: the server's
``checkpoint_save_started/write_progress/save_finished/deleted/loaded`` with the caller's node, host pid, path,
sha256 and step, and the engine's inferred ``process_started`` / ``step_completed`` (source ``progress``, pid
``node0:<n>``) written when it reads the printed progress, after the round's loads. Each verdict is shown to pass
on a correct resume and to fail, with its cause, on the mistake it exists to catch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from chaos.analysis.checkpoints import checkpoint_verdicts, restart_loop_cause
from chaos.analysis.load import load_events
from chaos.analysis.metrics import fault_metrics, worker_restarts
from chaos.events import EndReason, Ev, Source

CKPT = "/run/x/ckpt"


class Script:
    """A print-only job on one node: rank 0 prints ``step N`` (no loss); files live in CKPT; 1 s clock."""

    def __init__(self, storage_layer: str | None = "fuse") -> None:
        self.t = 0.0
        env = {"storage_layer": storage_layer} if storage_layer else {}
        self.events: list[dict[str, Any]] = [{"t": 0.0, "source": Source.ENGINE, "event": Ev.RUN_STARTED,
                                              "run_id": "r", "environment": env}]
        self.round = 0
        self.pids = [100]
        self.files: dict[str, str] = {}  # path -> sha256 of the bytes on storage now
        self.finished: dict[str, int] = {}  # sha256 -> step of the save that finished with it
        self.printed = 0
        self.started_round = False

    def _add(self, event: str, source: str, **fields: Any) -> Script:
        self.t += 1
        self.events.append({"t": self.t, "source": source, "event": event, **fields})
        return self

    def _storage(self, event: str, pid: int | None = None, **fields: Any) -> Script:
        return self._add(event, Source.STORAGE, node="node0", pid=pid or self.pids[0], **fields)

    def step(self, first: int, last: int | None = None) -> Script:
        for s in range(first, (last or first) + 1):
            if not self.started_round:  # the engine infers the round when it reads its first printed step
                self.round += 1
                self._add(Ev.PROCESS_STARTED, Source.PROGRESS, node="node0", pid=f"node0:{self.round}")
                self.started_round = True
            self._add(Ev.STEP_COMPLETED, Source.PROGRESS, node="node0", pid=f"node0:{self.round}", step=s, loss=None)
            self.printed = s
        return self

    def save(self, name: str, finish: bool = True, atomic: bool = False) -> Script:
        path = f"{CKPT}/{name}"
        target = path + ".tmp" if atomic else path
        step = self.printed  # the name's number where it has one (all names used here carry the printed step)
        self._storage(Ev.CHECKPOINT_SAVE_STARTED, path=target, step=step)
        self._storage(Ev.CHECKPOINT_WRITE_PROGRESS, path=target, written=1 << 20, step=step)
        if not finish:
            self.files[target] = hashlib.sha256(f"torn {name} {self.t}".encode()).hexdigest()
            return self
        sha = hashlib.sha256(f"{name} {self.t}".encode()).hexdigest()
        self.files[target] = sha
        self.finished[sha] = step
        self._storage(Ev.CHECKPOINT_SAVE_FINISHED, path=target, sha256=sha, bytes=1000, step=step)
        if atomic:
            self.files[path] = self.files.pop(target)
            self._storage(Ev.CHECKPOINT_DELETED, path=target, step=step)
            self._storage(Ev.CHECKPOINT_SAVE_FINISHED, path=path, sha256=sha, bytes=1000, step=step,
                          renamed_from=target)
        return self

    def crash(self) -> Script:
        """The node is killed (a fault); torchrun starts new workers (two ranks: new pids)."""
        self._add(Ev.FAULT_INJECTED, Source.ENGINE, fault_id=0, kind="crash", target="node0", disruptive=True,
                  mechanism="SIGKILL", details={})
        self.pids = [self.pids[0] + 100, self.pids[0] + 101]
        self.started_round = False
        return self

    def load(self, name: str) -> Script:
        """Every rank reads the file (the storage layer sees each process's first read)."""
        path = f"{CKPT}/{name}"
        sha = self.files[path]
        for pid in self.pids:
            self._storage(Ev.CHECKPOINT_LOADED, pid=pid, path=path, sha256=sha, bytes=1000,
                          step=self.finished.get(sha))
        return self

    def end(self, reason: str = EndReason.COMPLETED) -> list[dict[str, Any]]:
        self._add(Ev.RUN_ENDED, Source.ENGINE, reason=reason, why=reason)
        return self.events


def trained(to: int, save_every: int = 50, atomic: bool = False) -> Script:
    s = Script()
    for k in range(1, to + 1):
        s.step(k)
        if k % save_every == 0:
            s.save(f"ckpt_{k}.pt", atomic=atomic)
    return s


def verdicts(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The checkpoint verdicts as result.json spells them."""
    return {name: v.to_dict() for name, v in checkpoint_verdicts(events, None, 1e-3).items()}


def test_a_correct_print_only_resume_passes_every_verdict() -> None:
    events = trained(170, atomic=True).crash().load("ckpt_150.pt").step(151, 200).end()
    v = verdicts(events)
    assert v["digests_ok"]["ok"] is True and "matched the digest" in v["digests_ok"]["why"]
    assert v["resumed_from_newest_valid"]["ok"] is True, v["resumed_from_newest_valid"]
    [restart] = v["resumed_from_newest_valid"]["restarts"]
    assert restart["loaded_step"] == restart["newest_valid_step"] == 150
    once = v["exactly_once"]
    assert once["ok"] is None and "no step trained twice or skipped" in once["why"]
    assert "resumed at step 151 from a checkpoint holding step 150" in once["why"]
    assert "chaos.probe.step_completed(step, sample_ids=" in once["why"]
    [fault] = fault_metrics(events)
    assert fault.resumed_from == 150 and fault.lost_steps == 20
    assert fault.resume_evidence == f"checkpoint_loaded (storage layer): {CKPT}/ckpt_150.pt"


def test_stale_checkpoint_chosen_by_name_is_named_with_both_steps() -> None:
    # "newest" by file name: ckpt_50.pt sorts after ckpt_150.pt
    events = trained(170).crash().load("ckpt_50.pt").step(51, 200).end()
    v = verdicts(events)["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale"
    assert "loaded ckpt_50.pt (step 50) while ckpt_150.pt (step 150) was complete and intact" in v["why"]


def test_torn_file_loaded_is_named_with_path_and_step() -> None:
    s = trained(160)
    s.step(161, 200).save("ckpt_200.pt", finish=False)  # crashed while torch.save wrote the final path
    events = s.crash().load("ckpt_200.pt").step(1, 5).end(EndReason.RESTART_LOOP)
    v = verdicts(events)
    digests = v["digests_ok"]
    assert digests["ok"] is False and digests["verdict"] == "loaded_corrupt"
    assert "step 200 (ckpt_200.pt)" in digests["why"] and "never finished (torn or partial file)" in digests["why"]
    # one cause, one failed verdict: it did pick the newest file (torn is the digest's finding)
    assert v["resumed_from_newest_valid"]["ok"] is True
    assert v["resumed_from_newest_valid"]["restarts"][0]["loaded_path"].endswith("ckpt_200.pt")


def test_overwritten_snapshot_torn_by_a_crash_mid_save() -> None:
    s = Script()
    for k in range(1, 101):
        s.step(k)
        if k % 50 == 0:
            s.save("snapshot.pt")  # one path, plain torch.save: the file is rewritten in place
    s.step(101, 150).save("snapshot.pt", finish=False)
    v = verdicts(s.crash().load("snapshot.pt").step(1, 3).end())
    assert v["digests_ok"]["ok"] is False
    assert "a later save (step 150) started over it and never finished" in v["digests_ok"]["why"]


def test_lost_all_progress_when_a_restart_loads_nothing() -> None:
    v = verdicts(trained(170).crash().step(1, 20).end())["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "lost_all_progress"
    assert "started from scratch while ckpt_150.pt (step 150) was complete and intact" in v["why"]


def test_off_by_one_resumes_are_flagged_in_the_surviving_lineage() -> None:
    again = verdicts(trained(170).crash().load("ckpt_150.pt").step(150, 200).end())["exactly_once"]
    assert again["ok"] is False and again["verdict"] == "steps_trained_twice"
    assert again["steps_trained_twice"] == [150] and "step 150 trained twice" in again["why"]
    skipped = verdicts(trained(170).crash().load("ckpt_150.pt").step(152, 200).end())["exactly_once"]
    assert skipped["ok"] is False and skipped["verdict"] == "steps_skipped"
    assert skipped["steps_skipped"] == [151] and "step 151 never trained" in skipped["why"]


def test_exact_resume_after_a_save_shows_as_a_restart() -> None:
    """Crash right after the save of step 150: the new round prints 151, a higher number; the engine's inferred
    start (from the new pids' loads) still makes it a restart that is judged."""
    events = trained(150).crash().load("ckpt_150.pt").step(151, 160).end()
    assert worker_restarts(events) == 1
    assert verdicts(events)["resumed_from_newest_valid"]["restarts"][0]["loaded_step"] == 150


def test_not_checked_when_no_storage_layer_can_see_loads() -> None:
    for layer, said in (("inotify", "inotify watcher"), ("off", "storage_layer: off"),
                        (None, "no storage layer recorded")):
        s = Script(storage_layer=layer)
        s.step(1, 60).crash().step(51, 60)  # whatever it loaded, nothing saw it
        v = verdicts(s.end())
        assert v["digests_ok"]["ok"] is None and said in v["digests_ok"]["why"], v["digests_ok"]
        assert v["resumed_from_newest_valid"]["ok"] is None
        assert v["exactly_once"]["ok"] is None and "chaos.probe.step_completed" in v["exactly_once"]["why"]


def test_the_probe_decides_when_the_job_reports_checkpoints_itself() -> None:
    """The shipped workload is seen twice (probe and storage layer): only the probe's events count."""
    s = trained(170).crash().load("ckpt_150.pt").step(151, 200)
    probe = [{"t": 0.5, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_SAVE_STARTED, "node": "node0", "pid": 1,
              "step": 50, "path": "p50"},
             {"t": 0.6, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_SAVE_FINISHED, "node": "node0", "pid": 1,
              "step": 50, "path": "p50", "sha256": "h50"}]
    events = sorted(probe + s.end(), key=lambda e: e["t"])
    v = verdicts(events)
    assert v["digests_ok"]["ok"] is None and v["digests_ok"]["why"] == "not checked: no checkpoint was loaded"
    [fault] = fault_metrics(events)
    assert fault.resume_evidence is not None and "storage layer" not in fault.resume_evidence


def test_a_crash_loop_on_a_torn_file_names_the_file() -> None:
    s = trained(160)
    s.step(161, 200).save("ckpt_200.pt", finish=False).crash()
    for _ in range(4):  # each round loads the torn file and dies before printing; the engine records the round
        s.load("ckpt_200.pt")
        s._add(Ev.PROCESS_STARTED, Source.PROGRESS, node="node0", pid=f"node0:{s.round + 1}")
        s.round += 1
        s.pids = [p + 10 for p in s.pids]
    events = s.end(EndReason.RESTART_LOOP)
    cause = restart_loop_cause(events)
    assert cause is not None and "ckpt_200.pt (step 200)" in cause and "torn or partial file" in cause
    assert worker_restarts(events) == 4


def snapshot_job(resume_at: int) -> list[dict[str, Any]]:
    """The PyTorch DDP tutorial's style: one ``snapshot.pt`` rewritten every 5 epochs of 10 steps; its step is the
    progress printed when the save began (the storage layer's rule for a name without a number)."""
    s = Script()
    for k in range(1, 171):
        s.step(k)
        if k % 50 == 0:
            s.save("snapshot.pt")
    return s.crash().load("snapshot.pt").step(resume_at, 200).end()


def test_an_unnumbered_snapshot_gets_one_step_of_slack_and_still_catches_a_skipped_epoch() -> None:
    ok = verdicts(snapshot_job(151))
    assert ok["resumed_from_newest_valid"]["ok"] is True and ok["exactly_once"]["ok"] is None
    [_, resumed] = ok["exactly_once"]["lineage"]
    assert resumed["checkpoint_step"] == 150 and resumed["step_from"] == "printed progress (±1 step)"
    # a script that saves before it prints the step is labelled a step behind: one step late is within the slack
    assert verdicts(snapshot_job(152))["exactly_once"]["ok"] is None
    # but the label is never ahead of what the file holds: printing the labelled step again trained it twice (the
    # PyTorch DDP tutorial's `EPOCHS_RUN = epoch`)
    again = verdicts(snapshot_job(150))["exactly_once"]
    assert again["ok"] is False and again["verdict"] == "steps_trained_twice", again
    skipped = verdicts(snapshot_job(161))["exactly_once"]  # resumed one epoch too late
    assert skipped["ok"] is False and skipped["steps_skipped"][:3] == [151, 152, 153]
    twice = verdicts(snapshot_job(101))["exactly_once"]  # resumed one snapshot interval too early
    assert twice["ok"] is False and twice["verdict"] == "steps_trained_twice"
    assert "steps 101-150 trained twice" in twice["why"] and twice["steps_trained_twice_count"] == 50


def test_a_round_that_died_before_loading_is_not_lost_progress() -> None:
    s = trained(170).crash()
    s._add(Ev.PROCESS_STARTED, Source.PROGRESS, node="node0", pid="node0:2")  # died in its rendezvous
    s.round, s.pids = 2, [500, 501]
    v = verdicts(s.load("ckpt_150.pt").step(151, 160).end())["resumed_from_newest_valid"]
    assert v["ok"] is True and v["restarts"][0]["note"] == "died before loading anything or training a step"


def test_loaded_from_a_file_the_storage_layers_null_fields_are_kept(tmp_path: Path) -> None:
    """``node``/``step`` null is the storage layer's contract (a torn file's load has no step): such lines are
    read, not skipped as unreadable, and the verdicts on the loaded history equal those on the event list."""
    s = trained(160)
    s.step(161, 200).save("ckpt_200.pt", finish=False)
    events = s.crash().load("ckpt_200.pt").step(1, 5).end()
    next(e for e in events if e["event"] == Ev.CHECKPOINT_LOADED)["node"] = None  # the caller's node unknown
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    history = load_events(path)
    assert history.unreadable.count == 0
    assert verdicts(history) == verdicts(events)
    assert verdicts(history)["digests_ok"]["ok"] is False


SHARDS = ("__0_0.distcp", "__1_0.distcp", ".metadata")  # torch.distributed.checkpoint: a directory per save


def sharded(to: int, save_every: int = 50) -> Script:
    s = Script()
    for k in range(1, to + 1):
        s.step(k)
        if k % save_every == 0:
            for name in SHARDS:
                s.save(f"it_{k:06d}/{name}")
    return s


def test_a_sharded_save_a_crash_cut_short_is_not_the_newest_checkpoint() -> None:
    """One shard of step 200 finished before the crash, the others never did: the job rightly resumes from the
    whole save of step 150 (found by a new user's DCP script: "loaded step 150 while __1_0.distcp (step 200) was
    complete and intact")."""
    s = sharded(160).step(161, 200)
    s.save("it_000200/__1_0.distcp").save("it_000200/__0_0.distcp", finish=False)
    s.crash()
    for name in (".metadata", *SHARDS[:2]):
        s.load(f"it_000150/{name}")
    v = verdicts(s.step(151, 220).end())
    assert v["resumed_from_newest_valid"]["ok"] is True, v["resumed_from_newest_valid"]
    [restart] = v["resumed_from_newest_valid"]["restarts"]
    assert restart["loaded_step"] == restart["newest_valid_step"] == 150
    assert v["digests_ok"]["ok"] is True


def test_an_older_whole_sharded_save_loaded_instead_of_the_newest_is_stale() -> None:
    s = sharded(210).crash()
    for name in SHARDS:
        s.load(f"it_000150/{name}")
    v = verdicts(s.step(151, 220).end())["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale", v
    assert "(step 150) while" in v["why"] and "(step 200) was complete and intact" in v["why"]


def test_restarts_that_load_and_die_before_a_step_are_not_judged() -> None:
    """A crash loop: each restart read a file and died before training a step. What it resumed from is unknown,
    so the verdict is "not checked" (it said "each of 2 restart(s) resumed from the newest valid checkpoint")."""
    s = trained(170)
    for _ in range(2):  # the engine writes each round's start (from torchrun's agent) after the round's loads
        s.crash().load("ckpt_150.pt")
        s.round += 1
        s._add(Ev.PROCESS_STARTED, Source.PROGRESS, node="node0", pid=f"node0:{s.round}")
    v = verdicts(s.end(EndReason.RESTART_LOOP))["resumed_from_newest_valid"]
    assert v["ok"] is None and "not checked: none of" in v["why"], v
    assert "loaded ckpt_150.pt, then died before training a step" in v["why"]


def test_the_layer_says_whether_a_saves_step_came_from_its_name() -> None:
    """``step_from`` on the layer's saves decides the slack of exactly_once: a step read from the path is exact, one
    taken from the printed progress may be a step behind (a job that saves before it prints)."""
    def resumed_at_152(step_from: str) -> dict[str, Any]:
        s = Script()
        for k in range(1, 171):
            s.step(k)
            if k % 50 == 0:
                s.save(f"ckpt_e{k // 50}.pt")  # its number is an epoch: the layer took the printed step
        for e in s.events:
            if e["event"] in (Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED):
                e["step_from"] = step_from
        return verdicts(s.crash().load("ckpt_e3.pt").step(152, 200).end())["exactly_once"]

    assert resumed_at_152("name")["verdict"] == "steps_skipped"  # 151 never trained
    said = resumed_at_152("progress")
    assert said["ok"] is None and said["lineage"][1]["step_from"] == "printed progress (±1 step)", said


def test_a_temporary_beside_the_old_file_of_its_step_does_not_make_saves_look_partial() -> None:
    """An atomic save (``ckpt_100.pt.tmp`` renamed over the old ``ckpt_100.pt``) after a stale resume: for a moment
    two files of step 100 exist. The temporary is no part of a save set, so the stale resume is still caught (it
    went unjudged: every single-file save looked one file short)."""
    s = trained(170, atomic=True).crash().load("ckpt_50.pt")
    for k in range(51, 201):
        s.step(k)
        if k % 50 == 0:
            s.save(f"ckpt_{k}.pt", atomic=True)
    v = verdicts(s.end())["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale", v
    assert "loaded ckpt_50.pt (step 50) while ckpt_150.pt (step 150) was complete and intact" in v["why"]


def test_a_newer_file_of_a_kind_no_restart_loads_is_no_checkpoint_it_should_have_resumed_from() -> None:
    """Ray Train's plain script (examples/byo/ray_train_plain.py, run 6 Dec 2026): each epoch a worker saves
    ``checkpoint_<date>/model.pt`` before the epoch is printed, then the controller rewrites its own bookkeeping,
    ``checkpoint_manager_snapshot.json``, after the print. The restart loads the newest model.pt; the snapshot,
    labelled a step later by the printed progress, is no checkpoint of the kind the job resumes from (it said
    "resumed_from_stale: loaded model.pt (step 11) while checkpoint_manager_snapshot.json (step 12) was complete")."""
    s = Script()
    for k in range(1, 13):
        s.save(f"plain-mlp/checkpoint_2026-12-06_16-58-{30 + k:02d}.123456/model.pt")
        s.step(k)
        s.save("plain-mlp/checkpoint_manager_snapshot.json")
    s.crash().load("plain-mlp/checkpoint_2026-12-06_16-58-42.123456/model.pt").step(13, 20)
    s.save("plain-mlp/checkpoint_2026-12-06_16-59-00.123456/model.pt")
    # the bookkeeping file cut short by the end of the run is not what a restart would load either
    s.save("plain-mlp/checkpoint_manager_snapshot.json", finish=False)
    every = verdicts(s.end())
    v = every["resumed_from_newest_valid"]
    assert v["ok"] is True, v
    [restart] = v["restarts"]
    assert restart["newest_valid_path"].endswith("16-58-42.123456/model.pt"), restart
    nxt = every["next_resume_intact"]
    assert nxt["ok"] is True and "16-59-00.123456/model.pt" in nxt["why"], nxt
    # an older model.pt loaded instead is still stale, the snapshot beside it notwithstanding
    s = Script()
    for k in range(1, 13):
        s.save(f"plain-mlp/checkpoint_2026-12-06_16-58-{30 + k:02d}.123456/model.pt")
        s.step(k)
        s.save("plain-mlp/checkpoint_manager_snapshot.json")
    s.crash().load("plain-mlp/checkpoint_2026-12-06_16-58-40.123456/model.pt")
    v = verdicts(s.step(11, 20).end())["resumed_from_newest_valid"]
    assert v["ok"] is False and v["verdict"] == "resumed_from_stale", v
    assert "16-58-42.123456" not in v["why"] and "model.pt (step 11)" in v["why"], v["why"]


def test_a_restart_that_loads_a_checkpoint_and_trains_from_step_1_again_lost_every_step() -> None:
    """The plain Ray script's epoch-not-restored bug (real run 6 Dec 2026): the weights came back from the step-11
    checkpoint, the loop from epoch 0; lost_steps said 1 (from the file's step), the job redid 12."""
    events = trained(170, atomic=True).crash().load("ckpt_150.pt").step(1, 200).end()
    [fault] = fault_metrics(events)
    assert fault.resumed_from == 150 and fault.lost_steps == 170, fault
    correct = trained(170, atomic=True).crash().load("ckpt_150.pt").step(151, 200).end()
    assert fault_metrics(correct)[0].lost_steps == 20
