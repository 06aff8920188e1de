"""Faults over a run's life: fire each trigger (``at`` seconds after the first step, ``at_step``, ``on`` an event),
inject through the fault kind's plug-in, heal at the end of ``duration`` or at teardown, and release the job's holds.

Only the plug-in interface is used (``inject``/``heal`` and the class facts ``disruptive``, ``targets_node``,
``lasts_until_healed``, ``stops_node``): no fault kind is named here.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chaos.capabilities import NODE_NETWORK
from chaos.channel import ChannelServer
from chaos.engine.nodes import NodeOrchestrator
from chaos.engine.progress import ProgressObserver
from chaos.engine.signals import Interrupted
from chaos.engine.states import FAULT_TRANSITIONS, FaultStatus, NodeStatus, move
from chaos.events import WRITE_PROGRESS_EVERY_BYTES, WRITE_PROGRESS_FIRST_BYTES, Ev, Source
from chaos.faults import FaultContext, FaultKind, fault_kind
from chaos.history import Event, HistoryWriter
from chaos.plan import STORE_NODE, Plan
from chaos.runtimes.base import Runtime
from chaos.scenario import Fault, ShippedWorkload
from chaos.spec import SERVER_PREFIXES
from chaos.storage.layer import StorageLayer, counts_as_trigger

# Sources whose held events (an ``id``) wait for the engine's acknowledgement: the probe and the storage layer.
HELD_BY = frozenset({Source.WORKLOAD, Source.STORAGE})
TRIGGER_SOURCES = frozenset({Source.WORKLOAD, Source.PROGRESS, Source.STORAGE})


@dataclass
class FaultState:
    """One fault of the scenario as the live view shows it; ``status`` changes only through :meth:`move_to`."""

    index: int
    spec: Fault
    # The kind's one instance for this planned fault: inject, observe and heal act through the same object, so a
    # kind may keep what it did on ``self`` as well as in ``ctx``.
    impl: FaultKind
    status: FaultStatus = FaultStatus.PENDING
    node: str | None = None
    t_injected: float | None = None
    heal_at: float | None = None
    mechanism: str | None = None
    ctx: FaultContext | None = None

    def move_to(self, status: FaultStatus) -> None:
        self.status = move(self.status, status, FAULT_TRANSITIONS)


def random_node(seed: int | None, nodes: int) -> int:
    """The node a ``target: random`` fault hits: a function of the seed alone, so a run can be replayed."""
    return random.Random(0 if seed is None else seed).randrange(nodes)


class FaultScheduler:
    def __init__(self, specs: list[Fault], runtime: Runtime, plan: Plan, history: HistoryWriter, acks_dir: Path,
                 nodes: NodeOrchestrator, progress: ProgressObserver, note: Callable[[str], None],
                 storage: StorageLayer | None = None):
        self._runtime = runtime
        self._plan = plan
        self._history = history
        self._acks_dir = acks_dir
        self.channel: ChannelServer | None = None  # set by the engine once its history channel listens
        self._nodes = nodes
        self._progress = progress
        self._note = note
        self._storage = storage
        # Which events count for ``on:`` triggers: a shipped workload's probe and, for kinds it never reports, its
        # storage layer (counts_as_trigger); any other job's probe, printed steps and layer.
        self._scenario = getattr(plan, "scenario", None)
        self._trigger_counts: dict[str, int] = {}
        self.not_started: str | None = None  # why the faulted run was not started (every fault's why_not_injected)
        self.faults = [FaultState(i, f, fault_kind(f.kind)) for i, f in enumerate(specs)]

    # ------------------------------------------------------------------ triggers
    def fire_due(self, now: float, new_events: list[Event]) -> None:
        """Inject every pending fault whose trigger is met by now or by one of this tick's new events."""
        progress = self._progress
        triggers = [e for e in new_events if self._counts(e)]
        for f in self.faults:
            if f.status is not FaultStatus.PENDING:
                continue
            spec = f.spec
            trigger_event: Event | None = None
            if spec.at is not None:
                fire = progress.first_step_t is not None and now >= progress.first_step_t + spec.at
            elif spec.at_step is not None:
                fire = progress.max_step >= spec.at_step
            else:
                assert spec.on is not None
                matching = [e for e in triggers if e.get("event") == spec.on.event]
                seen_before = self._trigger_counts.get(spec.on.event, 0)
                idx = spec.on.occurrence - seen_before - 1
                fire = 0 <= idx < len(matching)
                trigger_event = matching[idx] if fire else None
            if fire:
                self._inject(f, trigger_event)
        for e in triggers:
            name = str(e.get("event"))
            self._trigger_counts[name] = self._trigger_counts.get(name, 0) + 1

    def _counts(self, e: Event) -> bool:
        if self._scenario is None:  # a test's stand-in plan: every job source counts
            return e.get("source") in TRIGGER_SOURCES
        return counts_as_trigger(self._scenario, e)

    def release(self, events: list[Event]) -> None:
        """Acknowledge the job's held events (the probe waits after them) once this tick's faults have landed."""
        for e in events:
            if "id" in e and e.get("source") in HELD_BY:
                # over the history channel when the held event came that way; else the file the holder polls
                # (the storage layer's holds, a probe given a file instead of a channel)
                if self.channel is None or not self.channel.ack(str(e["id"])):
                    (self._acks_dir / str(e["id"])).touch()

    # ------------------------------------------------------------------ inject
    def _resolve_target(self, f: FaultState, trigger_event: Event | None) -> str | None:
        target = f.spec.target
        if not f.impl.targets_node:
            return None
        if isinstance(target, int):
            return f"node{target}"
        if target == "rendezvous_host":
            return STORE_NODE if self._plan.store is not None else "node0"
        if target == "store":
            return STORE_NODE
        if isinstance(target, str) and target.startswith(SERVER_PREFIXES):
            return target  # a rendezvous backend's server (etcd0, ...)
        if target == "random":
            return f"node{random_node(f.spec.seed, len(self._plan.nodes))}"
        assert trigger_event is not None
        return str(trigger_event.get("node"))

    def _inject(self, f: FaultState, trigger_event: Event | None) -> None:
        t_decided = time.time()
        impl = f.impl
        node = self._resolve_target(f, trigger_event)
        f.node = node
        where = node or ("network" if NODE_NETWORK in impl.needs else "storage")
        base = {"fault_id": f.index, "kind": f.spec.kind, "target": where, "disruptive": impl.disruptive}
        status = None
        if node == STORE_NODE or (node or "").startswith(SERVER_PREFIXES):
            status = self._nodes.service_status(node)  # type: ignore[arg-type]
        elif node is not None:
            status = self._nodes.status(node)
        if status is not None and status is not NodeStatus.RUNNING:
            f.move_to(FaultStatus.SKIPPED)
            self._history.write(Ev.FAULT_SKIPPED, **base, why=f"{node} is {status}")
            self._note(f"skipped {f.spec.kind} on {node}: it is {status}")
            return
        ctx = FaultContext(self._runtime, f.spec, node, self._plan.checkpoint_dir, self._plan, fault_id=f.index,
                           storage=self._storage.control if self._storage is not None else None,
                           channel=self.channel)
        try:
            mechanism = impl.inject(ctx)
        except Interrupted:
            raise  # Ctrl-C / SIGTERM while injecting: stop the run (a network fault undid its own half)
        except Exception as exc:  # recorded, never hidden: the fault did not happen
            f.move_to(FaultStatus.FAILED)
            self._history.write(Ev.FAULT_FAILED, **base, why=f"{type(exc).__name__}: {exc}",
                                traceback=traceback.format_exc())
            self._note(f"{f.spec.kind} failed: {exc}")
            return
        now = time.time()
        effect = self._runtime.effect_time(node) if node is not None else None
        # the fault's time is when it took effect: a runtime that checks after its signal says when that was
        f.t_injected = effect if effect is not None and t_decided <= effect <= now else now
        f.mechanism, f.ctx = mechanism, ctx
        if impl.disruptive:
            self._progress.fault_injected()
        self._history.write(Ev.FAULT_INJECTED, **base, mechanism=mechanism, details=ctx.details,
                            trigger_event=trigger_event.get("event") if trigger_event else None,
                            max_step=self._progress.max_step, t_decided=t_decided, t=f.t_injected,
                            **({"t_returned": now} if f.t_injected != now else {}))
        self._observe(f)
        if node is not None and impl.stops_node:
            self._nodes.stopped(node)
        self._note(f"injected {f.spec.kind} on {where} at step {self._progress.max_step}")
        heal_after = impl.heal_after(f.spec) if hasattr(impl, "heal_after") else f.spec.duration
        if heal_after is not None:
            f.move_to(FaultStatus.ACTIVE)
            f.heal_at = f.t_injected + heal_after
        elif impl.lasts_until_healed:
            f.move_to(FaultStatus.ACTIVE)  # lasts until the run ends; healed at teardown
        else:
            f.move_to(FaultStatus.DONE)

    def abandon_pending(self) -> None:
        """Run's end: every fault whose trigger was never met is recorded as not having happened, with why."""
        progress = self._progress
        for f in self.faults:
            if f.status is not FaultStatus.PENDING:
                continue
            spec = f.spec
            if self.not_started is not None:
                why = f"the faulted run was never started ({self.not_started})"
            elif spec.at is not None:
                why = (f"its trigger ({spec.at:g}s after the first step) was never met: the run ended first"
                       if progress.first_step_t is not None else
                       f"its trigger ({spec.at:g}s after the first step) was never met: no step was completed")
            elif spec.at_step is not None and progress.max_step >= spec.at_step:
                why = f"step {spec.at_step} was reached only as the run ended: the fault had no time to fire"
            elif spec.at_step is not None:
                why = (f"step {spec.at_step} was never reached (the highest step completed was "
                       f"{progress.max_step})")
            else:
                assert spec.on is not None
                seen = self._trigger_counts.get(spec.on.event, 0)
                why = (f"{spec.on.event} #{spec.on.occurrence} never happened (the job emitted it {seen} time(s)"
                       + (f"; {self._no_event_why(spec.on.event)}" if seen == 0 else "") + ")")
            f.move_to(FaultStatus.SKIPPED)
            where = f"node{spec.target}" if isinstance(spec.target, int) else spec.target
            self._history.write(Ev.FAULT_NOT_REACHED, fault_id=f.index, kind=spec.kind, target=where,
                                disruptive=f.impl.disruptive, why=why)
            self._note(f"{spec.kind} never happened: {why}")

    def _no_event_why(self, event: str) -> str:
        """Why a job may have emitted no such checkpoint event, true to this run's storage layer: when it saved but
        no save wrote enough for a progress event, that (the event fires only past a size)."""
        saves = self._trigger_counts.get(Ev.CHECKPOINT_SAVE_FINISHED, 0) or self._trigger_counts.get(
            Ev.CHECKPOINT_SAVE_STARTED, 0)
        if event == Ev.CHECKPOINT_WRITE_PROGRESS and saves:
            first, every = WRITE_PROGRESS_FIRST_BYTES >> 20, WRITE_PROGRESS_EVERY_BYTES >> 20
            return (f"{saves} save(s) seen, none of which wrote {first} MiB: the storage layer emits it when a "
                    f"save's bytes first pass {first} MiB (then every {every} MiB), and this job's checkpoints are "
                    "smaller; trigger on checkpoint_save_started instead")
        layer = self._storage.kind if self._storage is not None else "off"
        where = self._plan.checkpoint_dir
        scenario = getattr(self._plan, "scenario", None)
        if layer == "off" and isinstance(getattr(scenario, "workload", None), ShippedWorkload):
            return "the shipped workload reports its checkpoints through the probe, and reported none"
        if layer == "off" and getattr(getattr(scenario, "storage", None), "layer", None) == "off":
            return "storage.layer is off, so only a script calling the probe reports checkpoint events"
        if layer == "off":
            return ("a script without the probe emits no such event unless torch-chaos watches its checkpoint "
                    "directory: set workload.checkpoint_dir")
        if layer == "inotify":
            return f"the inotify watcher on {where} saw no such file operation (it sees no loads)"
        return f"the storage layer saw no such operation in {where}: the job saved or loaded elsewhere, or never"

    # ------------------------------------------------------------------ heal
    def heal_due(self, now: float) -> None:
        for f in self.faults:
            if f.status is FaultStatus.ACTIVE:
                self._observe(f)
            if f.status is FaultStatus.ACTIVE and f.heal_at is not None and now >= f.heal_at:
                self._heal(f)

    def _observe(self, f: FaultState) -> None:
        """Write what an acting fault saw (FaultKind.observe); a failure to look is noted, never fatal."""
        if f.ctx is None:
            return
        observe = getattr(f.impl, "observe", None)
        if observe is None:
            return
        try:
            seen = observe(f.ctx)
        except Exception as exc:
            self._note(f"{f.spec.kind}: could not observe its effect: {exc}")
            return
        for e in seen:
            fields = dict(e)
            self._history.write(Ev(fields.pop("event")), **fields)

    def heal_all(self) -> None:
        """Teardown: heal every fault still active, whatever ended the run."""
        for f in self.faults:
            if f.status is FaultStatus.ACTIVE:
                self._heal(f, at_teardown=True)

    def _heal(self, f: FaultState, at_teardown: bool = False) -> None:
        assert f.ctx is not None
        f.ctx.closing = True  # the last look: nothing may stay held back
        self._observe(f)
        try:
            healed = f.impl.heal(f.ctx) or {}
            self._history.write(Ev.FAULT_HEALED, fault_id=f.index, kind=f.spec.kind, target=f.node,
                                at_teardown=at_teardown, **healed)
        except Interrupted:
            raise  # still active: teardown heals it
        except Exception as exc:
            self._history.write(Ev.FAULT_HEAL_FAILED, fault_id=f.index, why=f"{type(exc).__name__}: {exc}",
                                traceback=traceback.format_exc())
        f.move_to(FaultStatus.HEALED)
        self._nodes.resumed(f.node)
        self._note(f"healed {f.spec.kind} on {f.node}")
