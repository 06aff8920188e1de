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
from chaos.history import HistoryWriter, read_history
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
    from chaos.faults.crash import Crash
    from chaos.runtimes.base import STORAGE_LAYER

    class ThroughTheLayer(Crash):
        needs = Crash.needs | {STORAGE_LAYER}

    plugins = {**registry.fault_plugins(), "crash": ThroughTheLayer}
    monkeypatch.setattr(scenario_module, "fault_plugins", lambda: plugins)
    monkeypatch.setattr(registry, "fault_plugins", lambda: plugins)
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
