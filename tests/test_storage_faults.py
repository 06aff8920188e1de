"""The storage fault kinds' inject/heal through the real StorageControl, against a stand-in server: a thread that
does what docs/storage.md asks of the FUSE server (re-read rules.json, install it into a
:class:`Rules`, write ``applied``), so the rules the kinds write are the rules the layer enforces.

Also: a kind without the storage layer fails clearly, a server that never answers makes the fault fail with its
rule withdrawn, the registry and explore accept the kinds, and validation refuses what cannot work.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from chaos.events import EndReason
from chaos.explore import fault_strategy
from chaos.faults.base import FaultContext
from chaos.loading import parse_scenario
from chaos.registry import fault_kind, fault_plugins
from chaos.runtimes.base import STORAGE_LAYER
from chaos.scenario import Explore, Limits, make_fault
from chaos.storage import control
from chaos.storage.control import APPLIED_FILE, RULES_FILE, StorageControl, StorageNotAcknowledged
from chaos.storage.rules import Rules
from tests.test_engine_parts import Run

KINDS = ("disk_full", "io_error", "slow_io", "fsync_stall", "lost_writes")


class StandInServer:
    """The server's side of the rules file, in a thread: what it enforces is ``self.rules``."""

    def __init__(self, control_dir: Path, backing: Path):
        self.control_dir, self.rules = control_dir, Rules(backing)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        seen = 0
        while not self._stop.wait(0.005):
            try:
                doc = json.loads((self.control_dir / RULES_FILE).read_text())
            except (OSError, ValueError):
                continue
            if doc["version"] != seen:
                seen = doc["version"]
                self.rules.install(doc)
                (self.control_dir / APPLIED_FILE).write_text(str(seen))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def layer(tmp_path: Path) -> Iterator[tuple[StorageControl, StandInServer]]:
    backing = tmp_path / "backing"
    backing.mkdir()
    server = StandInServer(tmp_path / "control", backing)
    yield StorageControl(tmp_path / "control"), server
    server.stop()


class KillRecorder:
    """A runtime that only records kills (lost_writes' power loss)."""

    name = "stub"

    def __init__(self) -> None:
        self.killed: list[str] = []

    def kill(self, name: str) -> str:
        self.killed.append(name)
        return f"SIGKILL {name}'s tree"


def spec_of(kind: str, **fields: Any) -> Any:
    return fault_plugins()[kind].options(kind=kind, at_step=5, **fields)


def context(spec: Any, storage: StorageControl | None, node: str | None = None, runtime: Any = None,
            fault_id: int = 3) -> FaultContext:
    return FaultContext(runtime or KillRecorder(), spec, node, None, None, fault_id=fault_id, storage=storage)


@pytest.mark.parametrize(("kind", "fields", "rule", "mechanism"), [
    ("disk_full", {"after_bytes": "1MiB", "paths": "*.pt"}, {"after_bytes": 1048576, "paths": "*.pt"},
     "writes to *.pt fail with ENOSPC after 1048576 more bytes"),
    ("io_error", {"ops": ["fsync"], "errno": "EROFS", "node": 1},
     {"ops": ["fsync"], "errno": "EROFS", "node": "node1", "probability": 1.0},
     "fsync on * (node1's operations only) fail with EROFS"),
    ("slow_io", {"latency": "50ms", "bandwidth": "20MB/s"}, {"latency_ms": 50.0, "bandwidth_bps": 20_000_000},
     "wait 50ms, reads and writes capped at 20000000 B/s"),
    ("fsync_stall", {"duration": 5}, {"paths": "*"}, "fsync on * blocks for 5s"),
])
def test_inject_installs_the_rule_and_heal_removes_it_exactly(
        layer: tuple[StorageControl, StandInServer], kind: str, fields: dict[str, Any], rule: dict[str, Any],
        mechanism: str) -> None:
    storage, server = layer
    other = context(spec_of("slow_io", latency="1ms"), storage, fault_id=9)
    fault_kind("slow_io").inject(other)  # another fault's rule must survive this one's heal
    ctx = context(spec_of(kind, **fields), storage)
    impl = fault_kind(kind)

    text = impl.inject(ctx)

    assert mechanism in text and "storage layer rule" in text
    installed = [r for r in server.rules.rules if r["fault_id"] == 3]
    assert len(installed) == 1 and installed[0]["kind"] == kind
    assert rule.items() <= installed[0].items()
    assert rule.items() <= ctx.details.items() and ctx.details["rules_version"] == storage.version
    assert impl.targets_node is False and impl.lasts_until_healed and impl.disruptive
    assert STORAGE_LAYER in impl.needs

    healed = impl.heal(ctx)

    assert healed == {"restored": True, "rules_version": storage.version}
    assert [r["fault_id"] for r in server.rules.rules] == [9]


def test_the_installed_rules_act_in_the_layer(layer: tuple[StorageControl, StandInServer]) -> None:
    storage, server = layer
    ctx = context(spec_of("disk_full"), storage)
    fault_kind("disk_full").inject(ctx)
    assert server.rules.check("write", "step_1.pt", "node0", 10).errno == "ENOSPC"
    fault_kind("disk_full").heal(ctx)
    assert server.rules.check("write", "step_1.pt", "node0", 10).errno is None
    stall = context(spec_of("fsync_stall"), storage, fault_id=4)
    fault_kind("fsync_stall").inject(stall)
    assert server.rules.check("fsync", "step_1.pt", "node0").stall and server.rules.stalled(4)
    fault_kind("fsync_stall").heal(stall)
    assert not server.rules.stalled(4)


def test_lost_writes_kills_then_cuts_unsynced_data(layer: tuple[StorageControl, StandInServer]) -> None:
    storage, server = layer
    backing = server.rules.backing
    rules = server.rules
    for name, data, sync in (("step_1.pt", b"a" * 100, True), ("step_2.pt", b"b" * 60, False)):
        rules.check("open_write", name, "node0")
        (backing / name).write_bytes(data)
        rules.wrote(name, "node0", 0, len(data))
        if sync:
            rules.synced(name)
    runtime = KillRecorder()
    ctx = context(spec_of("lost_writes", target=0), storage, node="node0", runtime=runtime)

    text = fault_kind("lost_writes").inject(ctx)

    assert runtime.killed == ["node0"]
    assert ctx.details["truncated"] == [{"path": "step_2.pt", "bytes": 60, "kept": 0}]
    assert ctx.details["bytes_lost"] == 60 and ctx.details["node"] == "node0"
    assert "SIGKILL node0's tree" in text and "step_2.pt 60->0 B" in text
    assert (backing / "step_1.pt").stat().st_size == 100 and (backing / "step_2.pt").stat().st_size == 0
    assert server.rules.rules == [] and storage.rules == {}  # one-shot: the rule is gone again


def test_without_the_storage_layer_the_fault_fails_clearly() -> None:
    for kind in KINDS:
        runtime = KillRecorder()
        spec = spec_of(kind, target=0) if kind == "lost_writes" else spec_of(
            kind, **({"latency": 0.01} if kind == "slow_io" else {}))
        with pytest.raises(RuntimeError, match="storage layer is not serving"):
            fault_kind(kind).inject(context(spec, None, node="node0", runtime=runtime))
        assert runtime.killed == []  # lost_writes does not kill a node it cannot then cut


def test_an_unanswered_rule_fails_the_fault_and_is_withdrawn(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "ACK_TIMEOUT_S", 0.1)
    storage = StorageControl(tmp_path / "control")  # no server answers
    ctx = context(spec_of("io_error"), storage)
    with pytest.raises(StorageNotAcknowledged):
        fault_kind("io_error").inject(ctx)
    assert storage.rules == {}
    assert json.loads((tmp_path / "control" / RULES_FILE).read_text())["rules"] == []
    runtime = KillRecorder()
    lost = context(spec_of("lost_writes", target=1), storage, node="node1", runtime=runtime)
    with pytest.raises(RuntimeError, match=r"node1 was killed .* reported no power loss"):
        fault_kind("lost_writes").inject(lost)
    assert storage.rules == {}


SCENARIO = """
name: t
cluster: {mode: elastic, nodes: 2, runtime: %s}
workload: {name: ddp-mlp}
faults: [%s]
"""


@pytest.mark.parametrize(("fault", "error"), [
    ("{kind: disk_full, at_step: 5, target: 0}", "disk_full takes no target"),
    ("{kind: disk_full, at_step: 5, node: 2}", "faults[0].node: node 2 does not exist"),
    ("{kind: disk_full, at_step: 5, after_bytes: lots}", "expected a size such as"),
    ("{kind: io_error, at_step: 5, errno: EBOGUS}", "unknown errno 'EBOGUS'"),
    ("{kind: io_error, at_step: 5, ops: [chmod]}", "faults[0].ops"),
    ("{kind: io_error, at_step: 5, probability: 0}", "faults[0].probability"),
    ("{kind: slow_io, at_step: 5}", "slow_io needs latency and/or bandwidth"),
    ("{kind: fsync_stall, at_step: 5, latency: 1}", "latency applies to kind: slow_io only"),
    ("{kind: lost_writes, at_step: 5}", "lost_writes needs a target"),
    ("{kind: lost_writes, at_step: 5, target: 0, duration: 3}", "lost_writes takes no duration"),
])
def test_validation_refuses_what_cannot_work(fault: str, error: str) -> None:
    with pytest.raises(Exception, match=re.escape(error)):
        parse_scenario(SCENARIO % ("local", fault))


def test_valid_storage_faults_validate_on_every_runtime() -> None:
    faults = ("{kind: disk_full, at_step: 5, after_bytes: 10MB, duration: 3s}, "
              "{kind: io_error, at_step: 5, ops: [read], count: 1}, {kind: slow_io, at_step: 5, latency: 50ms}, "
              "{kind: fsync_stall, on: {event: checkpoint_save_started}}, "
              "{kind: lost_writes, at_step: 9, target: 1, writeback_s: 30s}")
    for runtime in ("local", "netns", "docker"):
        assert [f.kind for f in parse_scenario(SCENARIO % (runtime, faults)).faults] == list(KINDS)


@settings(max_examples=50, deadline=None)
@given(fault_strategy(Explore(kinds=list(KINDS), targets=[0, 1], durations=(1, 3)), nodes=2))
def test_explore_generates_valid_storage_faults(plan: list[Any]) -> None:
    for f in plan:
        assert f.kind in KINDS
        if f.kind == "lost_writes":
            assert f.target in (0, 1) and f.duration is None
        else:
            assert f.target is None and f.duration is not None and 1 <= f.duration <= 3


# ---------------------------------------------------------------------------------------------------- in the engine

def test_in_the_engine_a_storage_fault_targets_storage_and_fails_clearly_without_the_layer(tmp_path: Path) -> None:
    run = Run(tmp_path, [make_fault(kind="disk_full", at_step=5)], nodes=1)
    run.nodes.start_cluster()
    run.job("step_completed", step=5, pid=7)
    run.tick(now=1.0)
    failed = [e for e in run.engine_events() if e["event"] == "fault_failed"]
    assert len(failed) == 1 and failed[0]["target"] == "storage", failed
    assert "storage layer is not serving" in failed[0]["why"]


def test_a_hung_run_names_the_process_the_storage_layer_holds(tmp_path: Path) -> None:
    run = Run(tmp_path, [], nodes=2)
    run.nodes.start_cluster()
    run.job("step_completed", step=150, pid=7, t=1.0)
    run.job("step_completed", step=150, pid=8, node="node1", t=1.0)
    stalled = {"source": "storage", "op": "fsync", "fault_id": 0}
    run.job("storage_op_stalled", pid=7, path="/run/checkpoints/.step_00000150.pt.tmp", t=1.5, **stalled)
    run.job("storage_op_stalled", pid=8, node="node1", path="/run/checkpoints/other", t=1.2, **stalled)
    run.job("step_completed", step=151, pid=8, node="node1", t=1.6)  # node1 went on: no longer held
    run.tick(now=2.0)
    hung = run.end.check(now=1.6 + Limits().stall_timeout_s + 1, started=0.0)
    assert hung is not None and hung.reason is EndReason.HUNG
    assert "node0 (pid 7) blocked in fsync of .step_00000150.pt.tmp" in hung.why and "storage fault 0" in hung.why
    assert "node1" not in hung.why
    # without a stall the why is as before (no false blame)
    (tmp_path / "quiet").mkdir()
    quiet = Run(tmp_path / "quiet", [], nodes=1)
    quiet.nodes.start_cluster()
    quiet.job("step_completed", step=3, pid=7, t=1.0)
    quiet.tick(now=2.0)
    why = quiet.end.check(now=1.0 + Limits().stall_timeout_s + 1, started=0.0).why  # type: ignore[union-attr]
    assert why == f"no step for {Limits().stall_timeout_s:g}s (stuck at step 3)"


def test_resume_step_comes_from_the_jobs_own_loads_and_never_from_a_stepless_one() -> None:
    """Seen for real: the layer's checkpoint_loaded of a digest sidecar (step 256, from 'sha256' in its name) or of
    an emptied file (step null) was taken as the resume step (256, or a TypeError that lost the whole result)."""
    from chaos.analysis.metrics import fault_metrics

    def history(*loads: dict[str, Any]) -> list[dict[str, Any]]:
        base = {"node": "node0", "rank": 0}
        return [
            {"t": 1.0, "source": "workload", "event": "process_started", "pid": 1, **base},
            *({"t": 1.0 + s / 100, "source": "workload", "event": "step_completed", "step": s, "pid": 1, **base}
              for s in range(1, 171)),
            {"t": 3.0, "source": "engine", "event": "fault_injected", "fault_id": 0, "kind": "lost_writes",
             "target": "node0", "disruptive": True, "mechanism": "m"},
            {"t": 4.0, "source": "workload", "event": "process_started", "pid": 2, **base},
            *loads,
            *({"t": 5.0 + s / 100, "source": "workload", "event": "step_completed", "step": s, "pid": 2, **base}
              for s in range(151, 200)),
        ]

    layer = {"source": "storage", "event": "checkpoint_loaded", "pid": 2, "node": "node0", "sha256": "x", "bytes": 1}
    probe = {"t": 4.6, "source": "workload", "event": "checkpoint_loaded", "pid": 2, "node": "node0", "step": 150,
             "path": "step_00000150.pt", "sha256": "x"}
    sidecar = {"t": 4.4, "path": "step_00000150.pt.sha256", "step": 256, **layer}
    emptied = {"t": 4.3, "path": "step_00000100.pt", "step": None, **layer}
    assert fault_metrics(history(emptied, sidecar, probe))[0].resumed_from == 150  # the probe's own load
    print_only = fault_metrics(history(emptied, {**sidecar, "step": 150}))[0]
    assert print_only.resumed_from == 150 and print_only.lost_steps == 20  # no probe: the layer's, stepless skipped
