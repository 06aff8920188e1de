"""The storage layer's decisions without a mount: which layer a run gets, what validation refuses, how the engine
treats the layer's events (held lines acknowledged, triggers counted per source), and the inotify fallback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.engine.progress import ProgressObserver
from chaos.engine.scheduler import FaultScheduler
from chaos.engine.states import FaultStatus
from chaos.events import Ev
from chaos.history import HistoryWriter, _field_checks, read_history, readable
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.scenario import make_fault
from chaos.storage import layer as layer_module
from chaos.storage.layer import choose, needs_fuse
from chaos.storage.watcher import InotifyWatcher

COMMAND = """\
name: s
workload:
  command: [python, train.py]
  progress_regex: 'step (?P<step>\\d+)'
"""


def scenario(extra: str = "", checkpoint_dir: str | None = "ckpt") -> Any:
    text = COMMAND + (f"  checkpoint_dir: {checkpoint_dir}\n" if checkpoint_dir else "") + extra
    return parse_scenario(text)


def test_a_runtime_whose_nodes_write_from_other_hosts_never_gets_a_mount_on_the_engine_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A FUSE mount on a login node would see none of the nodes' writes (they reach the shared filesystem from
    their own hosts). Slurm runs the layer on each node's host instead (fuse_on_node_hosts), whatever the engine's
    host has; a runtime with neither gets a watch under auto, fuse is refused, and the result says why the loads
    are unseen."""
    from chaos.analysis.ckpt_source import loads_visible
    from chaos.plan import PlanError
    from chaos.runtimes.slurm import SlurmRuntime
    from chaos.storage.layer import why_layer

    assert SlurmRuntime.fuse_on_engine_host is False and SlurmRuntime.fuse_on_node_hosts is True
    s = scenario()
    monkeypatch.setattr(layer_module, "fuse_problem", lambda: "/dev/fuse is missing")  # the engine's host lacks it
    assert choose(s, False, True) == "fuse" and choose(scenario("storage: {layer: fuse}\n"), False, True) == "fuse"
    assert choose(scenario("storage: {layer: inotify}\n"), False, True) == "inotify"
    assert choose(scenario("storage: {layer: off}\n"), False, True) == "off"
    monkeypatch.setattr(layer_module, "fuse_problem", lambda: None)
    assert choose(s, fuse_on_engine_host=False) == "inotify"
    with pytest.raises(PlanError, match=r"from their own hosts .* set storage.layer: auto"):
        choose(scenario("storage: {layer: fuse}\n"), fuse_on_engine_host=False)
    why = why_layer(s, "inotify", fuse_on_engine_host=False)
    assert why is not None and "from their own hosts" in why
    assert why_layer(s, "inotify") == "no /dev/fuse or libfuse3" and why_layer(s, "fuse") is None
    history = [{"t": 1.0, "event": "run_started", "source": "engine",
                "environment": {"storage_layer": "inotify", "storage_layer_why": why}}]
    visible, said = loads_visible(history)
    assert not visible and why in said


def test_why_loads_are_unseen_names_what_never_ran() -> None:
    """A run whose job never got to start is not told that its job "reports no checkpoint" (that blames a job that
    never ran); a job that ran without the probe or a storage layer still is."""
    from chaos.analysis.ckpt_source import loads_visible

    started = {"t": 0.0, "event": "run_started", "source": "engine", "environment": {}}
    ended = {"t": 9.0, "event": "run_ended", "source": "engine", "reason": "failed_to_start"}
    node = {"t": 1.0, "event": "node_started", "source": "engine", "node": 0}
    step = {"t": 2.0, "event": "step_completed", "source": "progress", "step": 1, "rank": 0, "incarnation": "a"}
    assert loads_visible([started, ended]) == (False, "no node of the job ever started, so it saved and loaded no "
                                                      "checkpoint that could be seen")
    assert "no training process of the job ever started" in loads_visible([started, node, ended])[1]
    assert "the job reports no checkpoint through chaos.probe" in loads_visible([started, node, step, ended])[1]


def test_which_layer_a_run_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_module, "fuse_problem", lambda: None)
    assert choose(scenario()) == "fuse"
    assert choose(scenario(checkpoint_dir=None)) == "off"  # nothing to watch
    assert choose(scenario("storage: {layer: inotify}\n")) == "inotify"
    assert choose(scenario("storage: {layer: off}\n")) == "off"
    assert choose(parse_scenario("name: s\nworkload: {name: ddp-mlp}\n")) == "off"  # the probe reports it all
    monkeypatch.setattr(layer_module, "fuse_problem", lambda: "/dev/fuse is missing")
    assert choose(scenario()) == "inotify"  # auto falls back
    assert choose(scenario("storage: {layer: fuse}\n")) == "fuse"  # and fuse asked for is required:
    assert needs_fuse(scenario("storage: {layer: fuse}\n")) and not needs_fuse(scenario())
    # a trigger the watcher could not hold needs FUSE under auto; inotify asked for explicitly accepts it
    held = "faults: [{kind: crash, target: 0, on: {event: checkpoint_save_started}}]\n"
    assert needs_fuse(scenario(held)) and not needs_fuse(scenario(held + "storage: {layer: inotify}\n"))
    assert not needs_fuse(scenario("faults: [{kind: crash, target: 0, on: {event: checkpoint_save_finished}}]\n"))


def test_a_shipped_workload_gets_the_layer_only_for_a_trigger_its_probe_does_not_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.golden import golden_key, golden_scenario

    monkeypatch.setattr(layer_module, "fuse_problem", lambda: None)
    progress = "faults: [{kind: crash, target: event_node, on: {event: checkpoint_write_progress}}]\n"
    ddp = parse_scenario("name: s\nworkload: {name: ddp-mlp}\n" + progress)
    tf = parse_scenario("name: s\ncluster: {launcher: tf-multiworker, nodes: 2}\nworkload: {name: tf-mlp}\n"
                        + progress)
    # train.py reports its write progress itself: a layer would count each of its saves twice
    assert layer_module.layer_only_triggers(ddp) == [] and choose(ddp) == "off" and not needs_fuse(ddp)
    # BackupAndRestore's save is one call: only the FUSE layer sees its bytes pass 1 MiB
    assert layer_module.layer_only_triggers(tf) == ["checkpoint_write_progress"]
    assert choose(tf) == "fuse" and needs_fuse(tf)
    golden = golden_scenario(tf)  # the fault-free run watches too, so both count the same occurrences
    assert golden.faults == [] and golden.storage.watch and choose(golden) == "fuse"
    assert not golden_scenario(ddp).storage.watch and choose(golden_scenario(ddp)) == "off"
    assert golden_key(tf) != golden_key(tf.model_copy(update={"faults": []}))  # a cached unwatched run is not reused
    # a trigger tf-mlp's probe reports itself needs no layer
    started = parse_scenario("name: s\ncluster: {launcher: tf-multiworker, nodes: 2}\nworkload: {name: tf-mlp}\n"
                             "faults: [{kind: crash, target: 0, on: {event: checkpoint_save_started}}]\n")
    assert choose(started) == "off" and not golden_scenario(started).storage.watch
    for layer in ("off", "inotify"):  # neither emits write progress: the fault could never fire
        with pytest.raises(ScenarioInvalid) as exc:
            parse_scenario("name: s\ncluster: {launcher: tf-multiworker, nodes: 2}\nworkload: {name: tf-mlp}\n"
                           f"storage: {{layer: {layer}}}\n" + progress)
        assert (f"faults[0].on.event: tf-mlp's probe never reports checkpoint_write_progress; only the storage "
                f"layer's FUSE mount emits it, which storage.layer: {layer} turns off") in str(exc.value)
    parse_scenario("name: s\nworkload: {name: ddp-mlp}\nstorage: {layer: off}\n" + progress)  # its probe does


def test_a_shipped_workloads_triggers_count_the_layers_events_only_of_kinds_its_probe_never_reports() -> None:
    from chaos.golden import trigger_counts

    progress = "faults: [{kind: crash, target: event_node, on: {event: checkpoint_write_progress}}]\n"
    ddp = parse_scenario("name: s\nworkload: {name: ddp-mlp}\n" + progress)
    tf = parse_scenario("name: s\ncluster: {launcher: tf-multiworker, nodes: 2}\nworkload: {name: tf-mlp}\n"
                        + progress)
    command = scenario()
    events = [{"t": 1.0, "source": source, "event": event} for source in ("storage", "workload")
              for event in ("checkpoint_write_progress", "checkpoint_save_started")]
    # one save, counted once: tf-mlp's probe reports its start and the layer its write progress (the probe never
    # does); ddp-mlp's probe reports both, and the layer's copies do not count
    tf_events = [e for e in events if (e["source"], e["event"]) != ("workload", "checkpoint_write_progress")]
    assert {k: v for k, v in trigger_counts(tf_events, tf).items() if v} == {
        "checkpoint_write_progress": 1, "checkpoint_save_started": 1}
    assert {k: v for k, v in trigger_counts(events, ddp).items() if v} == {
        "checkpoint_write_progress": 1, "checkpoint_save_started": 1}
    assert [layer_module.counts_as_trigger(tf, e) for e in events] == [True, False, True, True]
    assert [layer_module.counts_as_trigger(ddp, e) for e in events] == [False, False, True, True]
    assert all(layer_module.counts_as_trigger(command, e) for e in events)  # a command: job's sources all count


@pytest.mark.parametrize(("directory", "said"), [
    (".", "name a subdirectory"), ("events.jsonl", "the run's own events.jsonl"), ("logs/ckpt", "own logs"),
    (".storage", "the run's own .storage")])
def test_a_checkpoint_dir_that_is_the_runs_own_files_is_refused(directory: str, said: str) -> None:
    with pytest.raises(ScenarioInvalid) as exc:
        scenario(checkpoint_dir=directory)
    assert "workload.checkpoint_dir" in str(exc.value) and said in str(exc.value)


def test_a_fault_through_the_layer_is_refused_without_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos import registry
    from chaos import scenario as scenario_module
    from chaos.capabilities import STORAGE_LAYER
    from chaos.faults.crash import Crash
    from chaos.storage import layer as layer_module

    class ThroughTheLayer(Crash):
        needs = Crash.needs | {STORAGE_LAYER}

    plugins = {**registry.fault_plugins(), "crash": ThroughTheLayer}
    monkeypatch.setattr(scenario_module, "fault_plugins", lambda: plugins)
    monkeypatch.setattr(registry, "fault_plugins", lambda: plugins)
    monkeypatch.setattr(layer_module, "fault_plugins", lambda: plugins)
    fault = "faults: [{kind: crash, target: 0, at_step: 3}]\n"
    with pytest.raises(ScenarioInvalid) as exc:
        scenario(fault + "storage: {layer: inotify}\n")
    assert ("faults[0].kind: crash acts through the storage layer's FUSE mount, which storage.layer: inotify turns "
            "off; set storage.layer: auto or fuse") in str(exc.value)
    ok = scenario(fault)
    assert needs_fuse(ok)  # FUSE becomes a required machine check for it
    assert choose(parse_scenario("name: s\nworkload: {name: ddp-mlp}\n" + fault)) in ("fuse", "inotify")


class Parts:
    """The scheduler and the progress observer over a history, as the engine wires them (no runtime acts)."""

    def __init__(self, tmp_path: Path, workload: Any, faults: list[Any]):
        self.events = tmp_path / "events.jsonl"
        self.events.touch()
        self.acks = tmp_path / "acks"
        self.acks.mkdir()
        history = HistoryWriter(self.events)
        self.progress = ProgressObserver(self.events, None, None, lambda _: None, now=0.0)
        plan = SimpleNamespace(scenario=SimpleNamespace(workload=workload, storage=SimpleNamespace(layer="auto")),
                               nodes=[], store=None, checkpoint_dir=tmp_path / "ckpt")
        nodes = SimpleNamespace(status=lambda name: None)
        self.faults = FaultScheduler(faults, None, plan, history, self.acks, nodes, self.progress,  # type: ignore[arg-type]
                                     lambda _: None)

    def line(self, source: str, event: str, **fields: Any) -> None:
        with open(self.events, "a") as f:
            f.write(json.dumps({"t": 1.0, "source": source, "event": event, "node": "node0", **fields}) + "\n")

    def tick(self) -> None:
        new = self.progress.drain()
        self.faults.fire_due(1.0, new)
        self.faults.release(new)


def test_held_storage_lines_are_acknowledged_like_the_probes(tmp_path: Path) -> None:
    parts = Parts(tmp_path, scenario().workload, [])
    parts.line("storage", Ev.CHECKPOINT_SAVE_STARTED, id="s1", path="x", step=1)
    parts.line("workload", Ev.CHECKPOINT_SAVE_STARTED, id="w1", path="x", step=1)
    parts.line("progress", Ev.STEP_COMPLETED, id="p1", step=1)  # the engine's own scrape never holds
    parts.tick()
    assert sorted(p.name for p in parts.acks.iterdir()) == ["s1", "w1"]


def test_the_shipped_workload_counts_only_the_probes_checkpoint_events(tmp_path: Path) -> None:
    on = {"event": "checkpoint_save_started", "occurrence": 2}
    shipped = parse_scenario("name: s\nworkload: {name: ddp-mlp}\n").workload
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    probe = Parts(tmp_path / "a", shipped, [make_fault(kind="crash", target=0, on=on)])
    command = Parts(tmp_path / "b", scenario().workload, [make_fault(kind="crash", target=0, on=on)])
    for parts in (probe, command):
        parts.line("workload", Ev.CHECKPOINT_SAVE_STARTED, path="x", step=1)  # the probe's event of one save
        parts.line("storage", Ev.CHECKPOINT_SAVE_STARTED, path="x", step=1)  # and the layer's of the same
        parts.tick()
    assert probe.faults.faults[0].status is FaultStatus.PENDING  # one save so far
    assert command.faults.faults[0].status is not FaultStatus.PENDING  # a command's events all count


def test_the_inotify_fallback_records_saves_renames_and_deletions(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    history = HistoryWriter(tmp_path / "events.jsonl")
    watcher = InotifyWatcher(directory, history)
    (directory / "ckpt_20.pt").write_bytes(b"a" * 100)  # straight to the final name
    watcher.poll()
    (directory / "tmp").write_bytes(b"b" * 10)
    watcher.poll()
    os.replace(directory / "tmp", directory / "last.pt")
    os.unlink(directory / "ckpt_20.pt")
    watcher.close()
    got = [(e["event"], Path(e["path"]).name, e.get("step"), e.get("bytes")) for e in read_history(
        tmp_path / "events.jsonl")]
    assert got == [
        ("checkpoint_save_started", "ckpt_20.pt", 20, None), ("checkpoint_save_finished", "ckpt_20.pt", 20, 100),
        ("checkpoint_save_started", "tmp", None, None), ("checkpoint_save_finished", "tmp", None, 10),
        ("checkpoint_deleted", "tmp", None, None), ("checkpoint_save_finished", "last.pt", None, 10),
        ("checkpoint_deleted", "ckpt_20.pt", 20, None)]
    assert all(e["source"] == "storage" and e["node"] is None for e in read_history(tmp_path / "events.jsonl"))
    assert all(readable(e, _field_checks()) for e in read_history(tmp_path / "events.jsonl"))


def test_a_saves_step_is_the_nodes_last_printed_or_reported_step(tmp_path: Path) -> None:
    from chaos.storage.record import Recorder, step_in_name

    history, log = tmp_path / "events.jsonl", tmp_path / "node1.log"
    history.write_text("".join(json.dumps(e) + "\n" for e in [
        {"t": 1, "source": "workload", "event": "step_completed", "node": "node0", "step": 170},
        {"t": 2, "source": "workload", "event": "step_completed", "node": "node0", "step": 51},  # after a restart
        {"t": 3, "source": "workload", "event": "checkpoint_save_finished", "node": "node0", "step": 50,
         "sha256": "ab"}]))
    log.write_text("[rank1] step 7\n[rank0] Epoch 1 | step 40\n[rank0] Epoch 1 | st")  # the last line unfinished
    recorder = Recorder(str(history), progress_regex=r"\[rank(?P<rank>\d+)\].* step (?P<step>\d+)",
                        logs={"node1": str(log)})
    assert recorder.last_step("node0") == 51  # the last, not the highest: the job resumed
    assert recorder.last_step("node1") == 40  # rank 0's line; rank 1's is not the job's step
    assert recorder.last_step("node9") == 40 and recorder.last_step(None) == 40  # else the job's last step
    assert recorder.saved_step("ab") == (True, 50) and recorder.saved_step("cd") == (False, None)
    assert step_in_name("ckpt_000150.pt") == 150 and step_in_name("run3/ckpt_e2_s40.pt") == 40
    assert step_in_name("snapshot.pt") is None
    # a sharded checkpoint is a directory per save: its files number shards, its name the step
    assert step_in_name("it_000080/__1_0.distcp") == 80 and step_in_name("it_000080/.metadata") == 80
    assert step_in_name("global_step100/mp_rank_00_model_states.pt") == 100
    assert step_in_name("checkpoint-500/model-00001-of-00002.safetensors") == 500
    assert step_in_name("rank1/step_40.pt") == 40 and step_in_name("v2/model.pt") is None


def test_a_number_of_the_path_is_the_step_only_near_the_jobs_progress() -> None:
    """A number in a checkpoint's path is its step when it lies near the step the job reported as the save began;
    else it is an epoch, a timestamp or a shard, and the job's progress is the step (found by a new user: an
    epoch-named file of an iteration-counting job resumed "from step 1", a timestamped one "from step 20261205")."""
    from chaos.storage.record import save_step

    assert save_step("ckpt_epoch1.pt", 80) == (80, "progress")
    assert save_step("ckpt_20261205-162811-047604.pt", 60) == (60, "progress")
    assert save_step("000080/__0_0.distcp", 80) == (80, "name")  # the shard index is not the step
    assert save_step("000002/__1_0.distcp", 2) == (2, "name") and save_step("it_000002/__0_0.distcp", 1) == (2, "name")
    assert save_step("ckpt_150.pt", 149) == (150, "name")  # saved before the step was printed
    assert save_step("ckpt_150.pt", 140, gap=10) == (150, "name")  # a job that prints every 10th step
    assert save_step("epoch_3/rank_1.pt", 3) == (3, "name")  # a job that counts epochs
    assert save_step("checkpoint.pt", 60) == (60, "progress")
    assert save_step("ckpt_150.pt", None) == (150, "name") and save_step("last.pt", None) == (None, None)


def test_a_torn_load_the_layer_saw_does_not_break_the_recovery_figures() -> None:
    """A probe job on local shares its pids with the layer's events: the layer's load of a torn file (step null)
    must not become the fault's resume step."""
    from chaos.analysis.metrics import fault_metrics

    steps = [{"t": 2.0 + i / 10, "source": "workload", "event": "step_completed", "node": "node0", "pid": 10,
              "rank": 0, "step": i + 1, "loss": 1.0} for i in range(10)]
    history = [
        {"t": 1.1, "source": "workload", "event": "process_started", "node": "node0", "pid": 10, "rank": 0},
        *steps,
        {"t": 3.5, "source": "engine", "event": "fault_injected", "fault_id": 0, "kind": "crash", "target": "node0",
         "disruptive": True, "mechanism": "SIGKILL", "details": {}, "trigger_event": None, "max_step": 10},
        {"t": 4.0, "source": "workload", "event": "process_started", "node": "node0", "pid": 11, "rank": 0},
        {"t": 4.1, "source": "storage", "event": "checkpoint_loaded", "node": "node0", "pid": 11,
         "path": "/c/ckpt_5.pt", "step": None, "sha256": "a", "bytes": 3},
        {"t": 4.2, "source": "workload", "event": "checkpoint_loaded", "node": "node0", "pid": 11, "rank": 0,
         "path": "/c/ckpt_5.pt", "step": 5, "sha256": "a"},
        {"t": 4.5, "source": "workload", "event": "step_completed", "node": "node0", "pid": 11, "rank": 0,
         "step": 6, "loss": 1.0},
    ]
    [fault] = fault_metrics(history)
    assert fault.resumed_from == 5 and fault.lost_steps == 5


def test_a_print_only_scripts_save_cost_comes_from_the_layer_and_a_probe_jobs_from_the_probe() -> None:
    from chaos.analysis.interval import save_cost_s

    def save(source: str, t0: float, t1: float) -> list[dict[str, Any]]:
        base = {"source": source, "node": "node0", "pid": 7, "path": "/c/ckpt_5.pt", "step": 5}
        return [{"t": t0, "event": "checkpoint_save_started", **base},
                {"t": t1, "event": "checkpoint_save_finished", "sha256": "a", "bytes": 1, **base}]

    assert save_cost_s(save("storage", 1.0, 1.25)) == 0.25
    # the same save seen by both: the probe's report is the job's own
    assert save_cost_s(save("workload", 1.0, 1.5) + save("storage", 1.1, 1.3)) == 0.5


def test_a_date_or_time_in_a_checkpoints_name_is_no_step() -> None:
    """Ray Train names each checkpoint folder by its time (`checkpoint_2026-12-06_14-50-04.714704`): at step 12 the
    month read as the save's step "from the name" (exact), and a correct resume looked like step 12 trained twice."""
    from chaos.analysis.rounds import step_from_name
    from chaos.storage.record import save_step, step_in_name

    ray = "plain-mlp/checkpoint_2026-12-06_14-50-04.714704/model.pt"
    assert step_in_name(ray) is None
    assert save_step(ray, 12) == (12, "progress") and save_step(ray, 6) == (6, "progress")
    assert step_from_name("checkpoint_2026-12-06_14-50-04.pt") is None
    assert step_in_name("run-20261206-142948/ckpt_150.pt") == 150
    # zero-padded steps are no dates: their digits do not start a plausible year-month-day
    assert step_in_name("ckpt_00001000.pt") == 1000 and step_in_name("iter_0001000/model.pt") == 1000
    assert save_step("epoch_12.pt", 12) == (12, "name")
