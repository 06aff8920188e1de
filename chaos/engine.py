"""The engine: brings a cluster up, fires and heals faults, plays the orchestrator, and always tears down.

It decides only what must be decided live (when a trigger fires, when to replace a node, when to give up);
every figure in the result is computed afterwards from the history by :mod:`chaos.analysis`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chaos import __version__
from chaos.analysis.result import write_result
from chaos.faults import FaultContext, fault_kind
from chaos.history import Event, FileTail, HistoryWriter
from chaos.plan import STORE_NODE, Plan, build_plan
from chaos.result import Result
from chaos.runtimes import create_runtime
from chaos.runtimes.base import Runtime
from chaos.scenario import CommandWorkload, Fault, Scenario

POLL_S = 0.02
FINISH_GRACE_S = 30.0


@dataclass
class NodeState:
    name: str
    status: str = "pending"  # pending | running | frozen | dead | finished | replacing
    exit_code: int | None = None
    replacements: int = 0
    restart_at: float | None = None


@dataclass
class FaultState:
    index: int
    spec: Fault
    status: str = "pending"  # pending | active | healed | done | skipped | failed
    node: str | None = None
    t_injected: float | None = None
    heal_at: float | None = None
    mechanism: str | None = None
    ctx: FaultContext | None = None


@dataclass
class Snapshot:
    """What a live view shows; rebuilt by the engine at every tick."""

    run_id: str
    run_dir: Path
    elapsed_s: float
    step: int
    target_steps: int | None
    restarts: int
    nodes: list[NodeState]
    faults: list[FaultState]
    phase: str
    log: list[str] = field(default_factory=list)


class Interrupted(BaseException):
    """SIGTERM/SIGINT reached the engine: stop, heal, tear down, and still write the result.

    A BaseException, like KeyboardInterrupt: the signal lands wherever the main thread is, and code there that
    tolerates ordinary errors (a slow Docker API call, a failed fault) must not swallow it."""


class RunInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Engine.run` after an interrupted run was torn down and its result written.

    A KeyboardInterrupt, so whatever called the engine (pytest, ``chaos explore``, ``chaos compare``) stops as
    the user asked instead of carrying on with its next run; ``result`` still holds the run's result.
    """

    def __init__(self, result: Result):
        super().__init__(result["why"])
        self.result = result


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    if threading_main():
        old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    else:
        yield


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def random_node(seed: int | None, nodes: int) -> int:
    """The node a ``target: random`` fault hits: a function of the seed alone, so a run can be replayed."""
    return random.Random(0 if seed is None else seed).randrange(nodes)


def new_run_id(scenario: Scenario) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{uuid.uuid4().hex[:6]}"


def environment(runtime: Runtime, plan: Plan) -> dict[str, Any]:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = None
    return {
        "torch_chaos": __version__, "torch": torch_version, "python": platform.python_version(),
        "platform": platform.platform(), "cpus": os.cpu_count(), **runtime.describe(),
        "mode": plan.scenario.cluster.mode, "elastic_settings": plan.elastic,
    }


class Engine:
    def __init__(self, scenario: Scenario, out_dir: str | Path = "runs", run_id: str | None = None,
                 on_update: Callable[[Snapshot], None] | None = None):
        self.scenario = scenario
        self.run_id = run_id or new_run_id(scenario)
        self.run_dir = Path(out_dir).resolve() / self.run_id
        self.on_update = on_update
        self.log: list[str] = []

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=False)
        (self.run_dir / "logs").mkdir()
        self.events_path = self.run_dir / "events.jsonl"
        self.events_path.touch()
        self.acks_dir = Path(str(self.events_path) + ".acks")
        self.acks_dir.mkdir()
        self.runtime = create_runtime(self.scenario, self.run_id, str(self.run_dir))
        self.plan = build_plan(self.scenario, self.run_id, self.run_dir, self.runtime.addressing(self.scenario))
        if self.plan.checkpoint_dir is not None:
            self.plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "scenario.yaml").write_text(
            yaml.safe_dump(self.scenario.model_dump(mode="json", exclude_none=True), sort_keys=False))
        (self.run_dir / "plan.yaml").write_text(yaml.safe_dump(self.plan.to_dict(), sort_keys=False))
        self.history = HistoryWriter(self.events_path)
        self.tail = FileTail(self.events_path)
        self.nodes = {n.name: NodeState(n.name) for n in self.plan.nodes}
        self.faults = [FaultState(i, f) for i, f in enumerate(self.scenario.faults)]
        self.max_step = 0
        self.first_step_t: float | None = None
        self.last_progress_t = time.time()
        self.rank0_starts = 0
        self.starts_since_progress = 0
        self.fault_since_last_start = False
        self.event_counts: dict[str, int] = {}
        self.finishing_since: float | None = None
        self.end: tuple[str, str] | None = None
        self.regex = None
        w = self.scenario.workload
        if isinstance(w, CommandWorkload):
            self.regex = re.compile(w.progress_regex)
            self.log_tails = {n: FileTail(self.runtime.log_path(n)) for n in self.nodes}
            self.progress_incarnation = {n: 0 for n in self.nodes}
            self.progress_last = {n: 0 for n in self.nodes}
            self.rank_group = "rank" in self.regex.groupindex
        self.checkpoint_files: dict[str, tuple[int, float]] = {}
        self.next_checkpoint_scan = 0.0
        self.target_steps = None
        if not isinstance(w, CommandWorkload):
            self.target_steps = int(w.args.get("steps", 400))

    def note(self, text: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')} {text}")

    # ------------------------------------------------------------------ main loop
    def run(self) -> Result:
        from chaos.doctor import require

        require(self.scenario)  # before anything is created: a missing piece is advice, not a half-run
        self._prepare()
        self.started = time.time()
        result_reason = ("error", "engine failed")
        with _signals_interrupt():
            try:
                golden = self._golden()
                self.started = time.time()  # the deadline counts from the faulted run, not the golden one
                self.last_progress_t = self.started
                self.history.write("run_started", run_id=self.run_id, scenario=self.scenario.name,
                                   environment=environment(self.runtime, self.plan), plan=self.plan.to_dict(),
                                   golden=golden)
                self.runtime.prepare(self.plan)
                self._start_cluster()
                while self.end is None:
                    self._tick()
                    time.sleep(POLL_S)
                result_reason = self.end
            except (Interrupted, KeyboardInterrupt) as exc:
                result_reason = ("interrupted", f"interrupted by {exc or 'SIGINT'}")
                self.note(result_reason[1])
            except Exception as exc:  # an engine bug must still end in teardown and a result
                result_reason = ("error", f"engine error: {type(exc).__name__}: {exc}")
                self.note(result_reason[1])
            finally:
                self._finish(result_reason)
        result = Result(write_result(self.run_dir), self.run_dir)
        if result_reason[0] == "interrupted":
            raise RunInterrupted(result)
        return result

    def _golden(self) -> dict[str, Any] | None:
        """Run (or reuse) the fault-free reference and keep its summary in this run's directory."""
        from chaos.golden import ensure_golden, wants_golden

        if not wants_golden(self.scenario):
            return None
        self.note("golden run: the same job without faults (cached after the first time)")
        self._update("golden")
        summary = ensure_golden(self.scenario, self.run_dir.parent)
        (self.run_dir / "golden.json").write_text(json.dumps(summary, indent=1))
        self.note(f"golden run {'reused' if summary.get('cached') else 'done'}: {summary.get('run_dir')}")
        return {"key": summary.get("key"), "run_dir": summary.get("run_dir"), "cached": summary.get("cached")}

    def _finish(self, reason: tuple[str, str]) -> None:
        # Block further interrupts while cleaning: a second Ctrl-C must not leave faults or processes behind.
        old = {}
        if threading_main():
            old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            with contextlib.suppress(Exception):
                self._drain_events()
            self.history.write("run_ended", reason=reason[0], why=reason[1], max_step=self.max_step)
            for f in self.faults:
                if f.status == "active":
                    self._heal(f, at_teardown=True)
            cleaned = self.runtime.teardown()
            self.history.write("teardown", killed=len(cleaned))
            self.history.close()
            self._update("finished")
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _start_cluster(self) -> None:
        if self.plan.store is not None:
            self.runtime.start_node(self.plan.store)
            self.history.write("node_started", node=STORE_NODE, role="store", argv=self.plan.store.argv)
        for node in self.plan.nodes:
            self._start_node(node.name, replacement=False)

    def _start_node(self, name: str, replacement: bool) -> None:
        node = self.plan.node(name)
        self.runtime.start_node(node)
        state = self.nodes[name]
        state.status, state.exit_code, state.restart_at = "running", None, None
        self.history.write("node_started", node=name, replacement=replacement, argv=node.argv)
        self.note(f"{'replaced' if replacement else 'started'} {name}")

    def _tick(self) -> None:
        now = time.time()
        new_events = self._drain_events()
        self._fire_triggers(now, new_events)
        self._ack(new_events)
        self._heal_due(now)
        self._watch_nodes(now)
        self._check_end(now)
        self._update("running")

    def _drain_events(self) -> list[Event]:
        if self.regex is not None:
            self._progress_from_logs()  # written to the history; observed when the tail reads it back
            self._watch_checkpoint_dir()
        events = list(self.tail.read_new())
        for e in events:
            self._observe(e)
        return events

    def _observe(self, e: Event) -> None:
        kind = e.get("event")
        if e.get("source") == "engine":
            return
        self.event_counts[kind] = self.event_counts.get(kind, 0) + 1
        if kind == "step_completed":
            if self.first_step_t is None:
                self.first_step_t = e["t"]
            self.last_progress_t = max(self.last_progress_t, e["t"])
            if e["step"] > self.max_step:
                self.max_step = e["step"]
                self.starts_since_progress = 0
        elif kind == "process_started" and e.get("rank", 0) == 0:
            self.rank0_starts += 1
            if self.rank0_starts > 1:
                # A restart that answers one of our faults is recovery; only unprovoked ones make a loop.
                if not self.fault_since_last_start:
                    self.starts_since_progress += 1
                self.note(f"workers restarted on {e.get('node')} (restart {self.rank0_starts - 1})")
            self.fault_since_last_start = False
            self.last_progress_t = max(self.last_progress_t, e["t"])

    def _progress_from_logs(self) -> None:
        """Command workloads without the probe: each printed progress line becomes a step event.

        A step number lower than the last one printed on that node means new worker processes (a restart),
        recorded as an inferred process start so that recovery is measured as for instrumented jobs.
        """
        assert self.regex is not None
        for name, tail in self.log_tails.items():
            for line in tail.read_lines():
                m = self.regex.search(line)
                if not m:
                    continue
                step = int(m.group("step"))
                rank = int(m.group("rank")) if self.rank_group and m.group("rank") is not None else None
                if rank not in (None, 0):
                    continue  # one line per step: rank 0's (every rank prints the same global step)
                inc = self.progress_incarnation[name]
                if step <= self.progress_last[name] or inc == 0:
                    inc += 1
                    self.progress_incarnation[name] = inc
                    self.history.write("process_started", source="progress", node=name, pid=f"{name}:{inc}")
                self.progress_last[name] = step
                loss = m.groupdict().get("loss")
                self.history.write("step_completed", source="progress", node=name, pid=f"{name}:{inc}",
                                   step=step, loss=float(loss) if loss else None)

    def _watch_checkpoint_dir(self) -> None:
        """Scripts without the probe: record each checkpoint file that appears or changes (for resume inference)."""
        directory = self.plan.checkpoint_dir
        now = time.monotonic()
        if directory is None or now < self.next_checkpoint_scan or not directory.is_dir():
            return
        self.next_checkpoint_scan = now + 0.25
        for path in sorted(directory.iterdir()):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if not path.is_file() or path.name.startswith("."):
                continue
            sig = (st.st_size, st.st_mtime)
            if self.checkpoint_files.get(str(path)) != sig:
                self.checkpoint_files[str(path)] = sig
                self.history.write("checkpoint_seen", source="progress", path=str(path), bytes=st.st_size,
                                   mtime=st.st_mtime)

    # ------------------------------------------------------------------ faults
    def _fire_triggers(self, now: float, new_events: list[Event]) -> None:
        for f in self.faults:
            if f.status != "pending":
                continue
            spec = f.spec
            trigger_event: Event | None = None
            if spec.at is not None:
                fire = self.first_step_t is not None and now >= self.first_step_t + spec.at
            elif spec.at_step is not None:
                fire = self.max_step >= spec.at_step
            else:
                assert spec.on is not None
                matching = [e for e in new_events if e.get("event") == spec.on.event and e.get("source") != "engine"]
                seen_before = self.event_counts.get(spec.on.event, 0) - len(matching)
                idx = spec.on.occurrence - seen_before - 1
                fire = 0 <= idx < len(matching)
                trigger_event = matching[idx] if fire else None
            if fire:
                self._inject(f, trigger_event)

    def _resolve_target(self, f: FaultState, trigger_event: Event | None) -> str | None:
        target = f.spec.target
        if not fault_kind(f.spec.kind).targets_node:
            return None
        if isinstance(target, int):
            return f"node{target}"
        if target == "rendezvous_host":
            return STORE_NODE if self.plan.store is not None else "node0"
        if target == "random":
            return f"node{random_node(f.spec.seed, len(self.plan.nodes))}"
        assert trigger_event is not None
        return str(trigger_event.get("node"))

    def _inject(self, f: FaultState, trigger_event: Event | None) -> None:
        impl = fault_kind(f.spec.kind)
        node = self._resolve_target(f, trigger_event)
        f.node = node
        where = node or ("network" if impl.lasts_until_healed else "storage")
        base = {"fault_id": f.index, "kind": f.spec.kind, "target": where,
                "disruptive": impl.disruptive}
        if node is not None and node != STORE_NODE and self.nodes[node].status not in ("running",):
            f.status = "skipped"
            self.history.write("fault_skipped", **base, why=f"{node} is {self.nodes[node].status}")
            self.note(f"skipped {f.spec.kind} on {node}: it is {self.nodes[node].status}")
            return
        ctx = FaultContext(self.runtime, f.spec, node, self.plan.checkpoint_dir, self.plan, fault_id=f.index)
        try:
            mechanism = impl.inject(ctx)
        except Interrupted:
            raise  # Ctrl-C / SIGTERM while injecting: stop the run (a network fault undid its own half)
        except Exception as exc:  # recorded, never hidden: the fault did not happen
            f.status = "failed"
            self.history.write("fault_failed", **base, why=f"{type(exc).__name__}: {exc}")
            self.note(f"{f.spec.kind} failed: {exc}")
            return
        f.t_injected = time.time()
        f.mechanism, f.ctx = mechanism, ctx
        if impl.disruptive:
            self.fault_since_last_start = True
        self.history.write("fault_injected", **base, mechanism=mechanism, details=ctx.details,
                           trigger_event=trigger_event.get("event") if trigger_event else None,
                           max_step=self.max_step)
        if node is not None and node in self.nodes and impl.stops_node:
            self.nodes[node].status = "frozen"
        self.note(f"injected {f.spec.kind} on {where} at step {self.max_step}")
        if f.spec.duration is not None:
            f.status, f.heal_at = "active", f.t_injected + f.spec.duration
        elif impl.lasts_until_healed:
            f.status, f.heal_at = "active", None  # lasts until the run ends; healed at teardown
        else:
            f.status = "done"

    def _ack(self, events: list[Event]) -> None:
        for e in events:
            if "id" in e and e.get("source") == "workload":
                (self.acks_dir / str(e["id"])).touch()

    def _heal_due(self, now: float) -> None:
        for f in self.faults:
            if f.status == "active" and f.heal_at is not None and now >= f.heal_at:
                self._heal(f)

    def _heal(self, f: FaultState, at_teardown: bool = False) -> None:
        assert f.ctx is not None
        try:
            healed = fault_kind(f.spec.kind).heal(f.ctx) or {}
            self.history.write("fault_healed", fault_id=f.index, kind=f.spec.kind, target=f.node,
                               at_teardown=at_teardown, **healed)
        except Interrupted:
            raise  # still active: teardown heals it
        except Exception as exc:
            self.history.write("fault_heal_failed", fault_id=f.index, why=f"{type(exc).__name__}: {exc}")
        f.status = "healed"
        if f.node in self.nodes and self.nodes[f.node].status == "frozen":
            self.nodes[f.node].status = "running"
        self.note(f"healed {f.spec.kind} on {f.node}")

    # ------------------------------------------------------------------ orchestrator
    def _watch_nodes(self, now: float) -> None:
        policy = self.scenario.cluster.node_restart
        for name, state in self.nodes.items():
            if state.status == "replacing" and state.restart_at is not None and now >= state.restart_at:
                if self.finishing_since is None:
                    state.replacements += 1
                    self._start_node(name, replacement=True)
                continue
            if state.status not in ("running", "frozen"):
                continue
            code = self.runtime.exit_code(name)
            if code is None:
                continue
            state.exit_code = code
            if code == 0:
                state.status = "finished"
                self.finishing_since = self.finishing_since or now
                self.history.write("node_exited", node=name, code=code)
                self.note(f"{name} finished")
                continue
            replace = (policy.policy == "on-failure" and state.replacements < policy.max_restarts
                       and self.finishing_since is None)
            state.status = "replacing" if replace else "dead"
            state.restart_at = now + policy.delay_s if replace else None
            self.history.write("node_exited", node=name, code=code, will_replace=replace)
            self.note(f"{name} exited with code {code}" + (f", replacing in {policy.delay_s:g}s" if replace else ""))
        if self.plan.store is not None:
            code = self.runtime.exit_code(STORE_NODE)
            if code is not None and not getattr(self, "_store_exit_logged", False):
                self._store_exit_logged = True
                self.history.write("node_exited", node=STORE_NODE, code=code, role="store")
                self.note(f"rendezvous store exited with code {code}")

    def _check_end(self, now: float) -> None:
        limits = self.scenario.limits
        states = list(self.nodes.values())
        if self.finishing_since is not None:
            if all(s.status in ("finished", "dead", "replacing") for s in states):
                self.end = ("completed", "every node finished its steps")
            elif now - self.finishing_since > FINISH_GRACE_S:
                self.end = ("completed", "a node finished; the others were stopped after the grace period")
            return
        if all(s.status == "dead" for s in states):
            codes = ", ".join(f"{s.name}={s.exit_code}" for s in states)
            self.end = ("failed", f"every node exited without finishing ({codes})")
        elif now - self.started > limits.deadline_s:
            self.end = ("deadline", f"deadline of {limits.deadline_s:g}s reached at step {self.max_step}")
        elif self.starts_since_progress >= limits.restart_loop_restarts:
            self.end = ("restart_loop", f"{self.starts_since_progress} worker restarts without progress past "
                                        f"step {self.max_step}")
        elif self.first_step_t is None and now - self.started > limits.startup_timeout_s:
            self.end = ("hung", f"no training step within {limits.startup_timeout_s:g}s of the start")
        elif self.first_step_t is not None and now - self.last_progress_t > limits.stall_timeout_s:
            self.end = ("hung", f"no step for {limits.stall_timeout_s:g}s (stuck at step {self.max_step})")

    def _update(self, phase: str) -> None:
        if self.on_update is None:
            return
        self.on_update(Snapshot(
            run_id=self.run_id, run_dir=self.run_dir, elapsed_s=time.time() - self.started, step=self.max_step,
            target_steps=self.target_steps, restarts=max(0, self.rank0_starts - 1),
            nodes=list(self.nodes.values()), faults=self.faults, phase=phase, log=self.log[-8:]))


def run(scenario: Scenario | str | Path, out_dir: str | Path = "runs",
        on_update: Callable[[Snapshot], None] | None = None) -> Result:
    """Run a scenario (a model, or a path to its YAML) and return its result (as written to result.json)."""
    if not isinstance(scenario, Scenario):
        from chaos.loading import load_scenario, resolve_scenario_path

        scenario = load_scenario(resolve_scenario_path(str(scenario)))
    return Engine(scenario, out_dir=out_dir, on_update=on_update).run()


if __name__ == "__main__":  # pragma: no cover
    print(run(sys.argv[1]))
