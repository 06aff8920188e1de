"""The engine's parts on their own, with a stand-in runtime and fault kind (no processes): state transitions,
the fault scheduler's triggers, skip/fail/heal paths, the orchestrator's replacement policy and the end detector.

What these parts write to the history is read back with the real reader, as analysis would."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from chaos.engine import (
    FINISH_GRACE_S,
    EndDetector,
    EndReason,
    FaultScheduler,
    FaultStatus,
    NodeOrchestrator,
    NodeStatus,
    Phase,
    ProgressObserver,
)
from chaos.engine import scheduler as scheduler_module
from chaos.engine.progress import LogProgress
from chaos.engine.states import FAULT_TRANSITIONS, NODE_TRANSITIONS, PHASE_TRANSITIONS, move
from chaos.history import HistoryWriter, read_history
from chaos.plan import NodePlan
from chaos.scenario import Fault, Limits, NodeRestart, make_fault
from tests.import_graph import SOURCE_SCANS_GROUP, parsed


class FakeRuntime:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.codes: dict[str, int | None] = {}
        self.effects: dict[str, float] = {}  # node -> when a fault took effect, as a slow runtime says

    def start_node(self, node: NodePlan) -> None:
        self.started.append(node.name)
        self.codes[node.name] = None

    def exit_code(self, name: str) -> int | None:
        return self.codes.get(name)

    def effect_time(self, name: str) -> float | None:
        return self.effects.pop(name, None)


class StopsNode:
    """A fault kind as the plug-in interface describes it: the scheduler must need nothing else."""

    disruptive: ClassVar[bool] = True
    targets_node: ClassVar[bool] = True
    lasts_until_healed: ClassVar[bool] = False
    stops_node: ClassVar[bool] = True
    fail: ClassVar[bool] = False
    healed: ClassVar[list[int]] = []

    def inject(self, ctx: Any) -> str:
        if self.fail:
            raise OSError("no such thing")
        ctx.details["seen"] = ctx.node
        return "stand-in"

    def heal(self, ctx: Any) -> dict[str, Any]:
        self.healed.append(ctx.fault_id)
        return {"restored": True}


class Run:
    """A history, a fake runtime and plan, and the engine parts wired as the engine wires them."""

    def __init__(self, tmp_path: Path, faults: list[Fault], nodes: int = 2, policy: NodeRestart | None = None):
        self.events = tmp_path / "events.jsonl"
        self.events.touch()
        (tmp_path / "acks").mkdir()
        self.history = HistoryWriter(self.events)
        self.runtime = FakeRuntime()
        plans = [NodePlan(f"node{i}", i, ["true"], {}) for i in range(nodes)]
        self.plan = SimpleNamespace(nodes=plans, store=None, checkpoint_dir=None,
                                    node=lambda name: next(p for p in plans if p.name == name))
        self.notes: list[str] = []
        self.progress = ProgressObserver(self.events, None, None, self.notes.append, now=0.0)
        self.nodes = NodeOrchestrator(self.runtime, self.plan, policy or NodeRestart(), self.history,  # type: ignore[arg-type]
                                      self.notes.append)
        self.faults = FaultScheduler(faults, self.runtime, self.plan, self.history, tmp_path / "acks",  # type: ignore[arg-type]
                                     self.nodes, self.progress, self.notes.append)
        self.end = EndDetector(Limits(), self.nodes, self.progress)

    def job(self, event: str, **fields: Any) -> None:
        line = {"t": fields.pop("t", 1.0), "source": "workload", "event": event, "node": "node0", **fields}
        with open(self.events, "a") as f:
            f.write(json.dumps(line) + "\n")

    def tick(self, now: float) -> None:
        new = self.progress.drain()
        self.faults.fire_due(now, new)
        self.faults.release(new)
        self.faults.heal_due(now)
        self.nodes.watch(now)

    def engine_events(self) -> list[dict[str, Any]]:
        return [e for e in read_history(self.events) if e["source"] == "engine"]


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[StopsNode]:
    StopsNode.healed = []
    StopsNode.fail = False
    monkeypatch.setattr(scheduler_module, "fault_kind", lambda kind: StopsNode())
    return StopsNode


def test_every_state_has_its_transitions_documented() -> None:
    assert set(NODE_TRANSITIONS) == set(NodeStatus)
    assert set(FAULT_TRANSITIONS) == set(FaultStatus)
    assert set(PHASE_TRANSITIONS) == set(Phase)
    assert move(NodeStatus.PENDING, NodeStatus.RUNNING, NODE_TRANSITIONS) is NodeStatus.RUNNING
    with pytest.raises(AssertionError, match="finished → running"):
        move(NodeStatus.FINISHED, NodeStatus.RUNNING, NODE_TRANSITIONS)
    with pytest.raises(AssertionError):
        move(FaultStatus.HEALED, FaultStatus.ACTIVE, FAULT_TRANSITIONS)
    # states print and compare as the strings the live view and older callers use
    assert f"{NodeStatus.FROZEN}" == "frozen" and Phase.GOLDEN == "golden"


@pytest.mark.usefixtures("stand_in")
def test_at_step_fires_once_the_step_is_seen_then_freezes_and_heals_the_node(tmp_path: Path) -> None:
    run = Run(tmp_path, [make_fault(kind="freeze", target=1, at_step=3, duration=2.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=2)
    run.tick(now=10.0)
    assert run.faults.faults[0].status is FaultStatus.PENDING
    run.job("step_completed", step=3, id="hold-1")
    run.tick(now=11.0)
    [fault] = run.faults.faults
    assert fault.status is FaultStatus.ACTIVE and fault.node == "node1"
    assert run.nodes.status("node1") is NodeStatus.FROZEN
    assert (tmp_path / "acks" / "hold-1").exists()  # the held job is released after the fault landed
    run.tick(now=fault.heal_at - 0.01)  # type: ignore[operator]
    assert fault.status is FaultStatus.ACTIVE
    run.tick(now=fault.heal_at + 0.01)  # type: ignore[operator]
    assert fault.status is FaultStatus.HEALED and run.nodes.status("node1") is NodeStatus.RUNNING
    names = [e["event"] for e in run.engine_events()]
    assert names == ["node_started", "node_started", "fault_injected", "fault_healed"]
    injected = run.engine_events()[2]
    assert injected["max_step"] == 3 and injected["details"] == {"seen": "node1"} and injected["disruptive"]


def test_the_fault_s_time_is_when_the_runtime_says_it_took_effect(tmp_path: Path, stand_in: type[StopsNode],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime that checks after its signal (Slurm's helper step) says when the signal went out: recovery and a
    freeze's duration count from there, not from the end of the check."""
    plain_inject = stand_in.inject

    def slow_inject(self: StopsNode, ctx: Any) -> str:
        ctx.runtime.effects[ctx.node] = time.time()  # the signal is out ...
        time.sleep(0.2)  # ... and the runtime goes on checking
        return plain_inject(self, ctx)

    monkeypatch.setattr(stand_in, "inject", slow_inject)
    run = Run(tmp_path, [make_fault(kind="freeze", target=1, at_step=3, duration=2.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=3)
    run.tick(now=11.0)
    [fault] = run.faults.faults
    injected = next(e for e in run.engine_events() if e["event"] == "fault_injected")
    assert injected["t"] == fault.t_injected and injected["t_decided"] <= fault.t_injected
    assert time.time() - fault.t_injected >= 0.2  # the effect's time, not inject's return
    assert fault.heal_at == pytest.approx(fault.t_injected + 2.0)
    assert "node1" not in run.runtime.effects  # read once


@pytest.mark.usefixtures("stand_in")
def test_a_fault_on_a_node_that_is_not_running_is_skipped(tmp_path: Path) -> None:
    run = Run(tmp_path, [make_fault(kind="crash", target=0, on={"event": "checkpoint_save_started"})])
    run.nodes.start_cluster()
    run.runtime.codes["node0"] = 0
    run.nodes.watch(now=1.0)
    assert run.nodes.status("node0") is NodeStatus.FINISHED
    run.job("checkpoint_save_started", step=1, path="x")
    run.tick(now=2.0)
    assert run.faults.faults[0].status is FaultStatus.SKIPPED
    assert run.engine_events()[-1]["event"] == "fault_skipped"
    assert run.engine_events()[-1]["why"] == "node0 is finished"


def test_a_fault_that_fails_to_inject_is_recorded_not_hidden(tmp_path: Path, stand_in: type[StopsNode]) -> None:
    stand_in.fail = True
    run = Run(tmp_path, [make_fault(kind="crash", target=0, at_step=1)])
    run.nodes.start_cluster()
    run.job("step_completed", step=1)
    run.tick(now=1.0)
    assert run.faults.faults[0].status is FaultStatus.FAILED
    failed = run.engine_events()[-1]
    assert failed["event"] == "fault_failed" and "OSError: no such thing" in failed["why"]
    assert "Traceback" in failed["traceback"] and 'raise OSError("no such thing")' in failed["traceback"]
    run.faults.heal_all()
    assert stand_in.healed == []  # nothing to heal: it never happened


def test_a_fault_that_fails_to_heal_keeps_its_traceback(tmp_path: Path, stand_in: type[StopsNode],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def heal(self: StopsNode, ctx: Any) -> dict[str, Any]:
        raise PermissionError("the rule is not ours to remove")
    monkeypatch.setattr(stand_in, "heal", heal)
    run = Run(tmp_path, [make_fault(kind="freeze", target=0, at_step=1, duration=600.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=1)
    run.tick(now=1.0)
    run.faults.heal_all()
    failed = run.engine_events()[-1]
    assert failed["event"] == "fault_heal_failed" and failed["why"] == "PermissionError: the rule is not ours to remove"
    assert "Traceback" in failed["traceback"] and "raise PermissionError" in failed["traceback"]


def test_active_faults_are_healed_at_teardown(tmp_path: Path, stand_in: type[StopsNode]) -> None:
    run = Run(tmp_path, [make_fault(kind="freeze", target=0, at_step=1, duration=600.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=1)
    run.tick(now=1.0)
    run.faults.heal_all()
    assert stand_in.healed == [0]
    assert run.engine_events()[-1]["at_teardown"] is True


class Observes(StopsNode):
    """A kind that sees its effect happen while it acts (as the memory faults see the kernel's OOM kills)."""

    stops_node: ClassVar[bool] = False
    seen: ClassVar[int] = 0

    def observe(self, ctx: Any) -> list[dict[str, Any]]:
        Observes.seen += 1
        return [{"event": "oom_killed", "fault_id": ctx.fault_id, "kind": "x", "node": ctx.node, "pid": Observes.seen,
                 "killed_at": 0.0, "limit_bytes": None, "evidence": "test"}]


def test_what_an_active_fault_observes_is_written_between_its_injection_and_its_heal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Observes.seen, Observes.healed, Observes.fail = 0, [], False  # another test may have left StopsNode.fail set
    monkeypatch.setattr(scheduler_module, "fault_kind", lambda kind: Observes())
    run = Run(tmp_path, [make_fault(kind="freeze", target=0, at_step=1, duration=5.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=1)
    run.tick(now=1.0)  # injected, observed right after, and once more as an active fault of this tick
    run.tick(now=2.0)
    run.faults.heal_all()
    names = [(e["event"], e.get("pid")) for e in run.engine_events() if e["event"] != "node_started"]
    assert names == [("fault_injected", None), ("oom_killed", 1), ("oom_killed", 2), ("oom_killed", 3),
                     ("oom_killed", 4), ("fault_healed", None)]
    run.tick(now=3.0)
    assert Observes.seen == 4  # healed: no longer asked


class Remembers(Observes):
    """A kind that keeps what it did on ``self``: the object that injected is the one asked to observe and heal."""

    selves: ClassVar[list[tuple[str, int]]] = []

    def inject(self, ctx: Any) -> str:
        self.selves.append(("inject", id(self)))
        return super().inject(ctx)

    def observe(self, ctx: Any) -> list[dict[str, Any]]:
        self.selves.append(("observe", id(self)))
        return []

    def heal(self, ctx: Any) -> dict[str, Any]:
        self.selves.append(("heal", id(self)))
        return super().heal(ctx)


def test_one_kind_instance_per_planned_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Remembers.selves, Remembers.healed, Remembers.fail = [], [], False
    monkeypatch.setattr(scheduler_module, "fault_kind", lambda kind: Remembers())  # a new object on every call
    run = Run(tmp_path, [make_fault(kind="freeze", target=0, at_step=1, duration=5.0),
                         make_fault(kind="freeze", target=1, at_step=1, duration=5.0)])
    run.nodes.start_cluster()
    run.job("step_completed", step=1)
    run.tick(now=1.0)
    run.faults.heal_all()
    one, two = (f.impl for f in run.faults.faults)
    assert one is not two
    assert {hook for hook, _ in Remembers.selves} == {"inject", "observe", "heal"}
    assert {who for _, who in Remembers.selves} == {id(one), id(two)}
    for impl in (one, two):
        hooks = [hook for hook, who in Remembers.selves if who == id(impl)]
        assert hooks[0] == "inject" and hooks[-1] == "heal" and "observe" in hooks


@pytest.mark.usefixtures("stand_in")
def test_on_event_fires_on_the_given_occurrence(tmp_path: Path) -> None:
    run = Run(tmp_path, [make_fault(kind="crash", target="event_node", on={"event": "checkpoint_save_started",
                                                                      "occurrence": 3})])
    run.nodes.start_cluster()
    run.job("checkpoint_save_started", step=1, path="a")
    run.job("checkpoint_save_started", step=2, path="b")
    run.tick(now=1.0)
    assert run.faults.faults[0].status is FaultStatus.PENDING
    run.job("checkpoint_save_started", step=3, path="c", node="node1")
    run.job("checkpoint_save_started", step=4, path="d")
    run.tick(now=2.0)
    assert run.faults.faults[0].node == "node1"  # the third one's node, though a fourth arrived in the same tick
    assert run.engine_events()[-1]["trigger_event"] == "checkpoint_save_started"


def test_failed_nodes_are_replaced_per_policy_until_the_job_finishes(tmp_path: Path) -> None:
    run = Run(tmp_path, [], policy=NodeRestart(policy="on-failure", delay_s=1.0, max_restarts=1))
    run.nodes.start_cluster()
    run.runtime.codes["node0"] = 137
    run.nodes.watch(now=10.0)
    assert run.nodes.status("node0") is NodeStatus.REPLACING
    run.nodes.watch(now=10.5)
    assert run.runtime.started == ["node0", "node1"]  # not before its delay
    run.nodes.watch(now=11.0)
    assert run.runtime.started == ["node0", "node1", "node0"]
    assert run.nodes.nodes["node0"].replacements == 1
    run.runtime.codes["node0"] = 137
    run.nodes.watch(now=12.0)
    assert run.nodes.status("node0") is NodeStatus.DEAD  # max_restarts reached
    exited = [e for e in run.engine_events() if e["event"] == "node_exited"]
    assert [e["will_replace"] for e in exited] == [True, False]


def test_a_node_whose_host_is_lost_with_no_spare_is_not_replaced(tmp_path: Path) -> None:
    """The policy says replace, the runtime says there is nowhere to (host_loss with no spare): the node is dead,
    the job goes on without it, and the history says why."""
    run = Run(tmp_path, [], policy=NodeRestart(policy="on-failure", delay_s=0.0, max_restarts=3))
    run.runtime.can_replace = lambda name: "its host c2 is lost" if name == "node1" else None  # type: ignore[attr-defined]
    run.nodes.start_cluster()
    run.runtime.codes["node1"] = -9
    run.nodes.watch(now=10.0)
    assert run.nodes.status("node1") is NodeStatus.DEAD and run.runtime.started == ["node0", "node1"]
    exited = [e for e in run.engine_events() if e["event"] == "node_exited"]
    assert exited[-1]["will_replace"] is False and exited[-1]["not_replaced"] == "its host c2 is lost"


def test_end_detector_reasons(tmp_path: Path) -> None:
    run = Run(tmp_path, [], nodes=1)
    run.nodes.start_cluster()
    assert run.end.check(now=1.0, started=0.0) is None
    hung = run.end.check(now=Limits().startup_timeout_s + 1, started=0.0)
    assert hung is not None and hung.reason is EndReason.HUNG and "no training step" in hung.why
    deadline = run.end.check(now=Limits().deadline_s + 1, started=0.0)
    assert deadline is not None and deadline.reason is EndReason.DEADLINE
    run.runtime.codes["node0"] = 1
    run.nodes.watch(now=2.0)
    failed = run.end.check(now=2.0, started=0.0)
    # it never completed a step: a failed start, not a job that failed halfway
    assert failed is not None and failed.reason is EndReason.FAILED_TO_START and "node0=1" in failed.why


def test_a_finished_node_ends_the_run_after_the_grace_period(tmp_path: Path) -> None:
    run = Run(tmp_path, [], nodes=2)
    run.nodes.start_cluster()
    run.runtime.codes["node0"] = 0
    run.nodes.watch(now=5.0)
    assert run.end.check(now=5.0 + FINISH_GRACE_S - 1, started=0.0) is None
    done = run.end.check(now=5.0 + FINISH_GRACE_S + 1, started=0.0)
    assert done is not None and done.reason is EndReason.COMPLETED and "grace period" in done.why


def test_unprovoked_restarts_count_towards_a_restart_loop_provoked_ones_do_not(tmp_path: Path) -> None:
    run = Run(tmp_path, [])
    for _ in range(2):
        run.job("process_started", rank=0)
    run.progress.drain()
    assert run.progress.starts_since_progress == 1 and run.progress.restarts == 1
    run.progress.fault_injected()
    run.job("process_started", rank=0)
    run.progress.drain()
    assert run.progress.starts_since_progress == 1 and run.progress.restarts == 2
    run.job("step_completed", step=1)
    run.progress.drain()
    assert run.progress.starts_since_progress == 0


def test_progress_lines_become_step_events_and_a_lower_step_is_a_restart(tmp_path: Path) -> None:
    log = tmp_path / "node0.log"
    log.write_text("step 1 loss 0.5\nstep 2 loss 0.4\nnoise\nstep 1 loss 0.5\n")
    history = HistoryWriter(tmp_path / "events.jsonl")
    LogProgress(r"step (?P<step>\d+) loss (?P<loss>[0-9.]+)", {"node0": log}, history).scrape()
    events = read_history(tmp_path / "events.jsonl")
    assert [(e["event"], e.get("step"), e["pid"]) for e in events] == [
        ("process_started", None, "node0:1"), ("step_completed", 1, "node0:1"), ("step_completed", 2, "node0:1"),
        ("process_started", None, "node0:2"), ("step_completed", 1, "node0:2")]
    assert {e["source"] for e in events} == {"progress"}


def _import_graph() -> dict[str, set[str]]:
    """chaos.* modules and the chaos modules each imports, lazy imports included, TYPE_CHECKING ones not."""
    import ast

    root = Path(__file__).resolve().parents[1]
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (root / "chaos").rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name if name and name != "chaos" else None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = parsed(path)
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for n in names if n.startswith("chaos.") and (r := resolve(n)) and r != module}
        graph[module] = deps
    return graph


@pytest.mark.xdist_group(SOURCE_SCANS_GROUP)  # the worker that parses chaos/ once for every such scan
def test_no_import_cycle_through_the_engine_golden_console_or_result() -> None:
    graph = _import_graph()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep == goal:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    watched = [m for m in graph if m.startswith("chaos.engine") or m in ("chaos.golden", "chaos.console",
                                                                         "chaos.run_result")]
    # a submodule importing a sibling is fine; nothing may import its way back to where it started
    cycles = [m for m in watched if reaches(m, m)]
    assert not cycles, f"import cycles through {cycles}"
    assert not reaches("chaos.golden", "chaos.engine") and not reaches("chaos.console", "chaos.engine")


def test_the_live_view_shows_states_by_name(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from chaos.console import live_view
    from chaos.engine import Snapshot

    run = Run(tmp_path, [make_fault(kind="crash", target=1, at_step=5)])
    run.nodes.start_cluster()
    snap = Snapshot(run_id="r", run_dir=tmp_path, elapsed_s=1.0, step=2, target_steps=10, restarts=0,
                    nodes=list(run.nodes.nodes.values()), faults=run.faults.faults, phase=Phase.GOLDEN)
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(live_view(snap))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "node0: running" in text and "pending" in text and "golden run first" in text
    assert "NodeStatus" not in text and "FaultStatus" not in text
