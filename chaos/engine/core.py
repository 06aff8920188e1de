"""The engine: prepares a run, wires its parts together, ticks them until the run is over, and always tears down.

The parts each have one job: :class:`~chaos.engine.progress.ProgressObserver` follows the job,
:class:`~chaos.engine.scheduler.FaultScheduler` fires and heals faults, :class:`~chaos.engine.nodes.NodeOrchestrator`
starts and replaces nodes, :class:`~chaos.engine.end.EndDetector` says when it is over. The engine decides only what
must be decided live; every figure in the result is computed afterwards from the history by :mod:`chaos.analysis`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import platform
import re
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chaos.analysis.checkpoints import control_request
from chaos.analysis.load import load_events
from chaos.analysis.run import RunAnalysis, analyze_run, write_result
from chaos.channel import ChannelServer, parse_address
from chaos.doctor import require
from chaos.engine.end import End, EndDetector
from chaos.engine.heartbeat import Heartbeat
from chaos.engine.nodes import NodeOrchestrator, NodeState
from chaos.engine.progress import CheckpointWatcher, LogProgress, NodeLogs, ProgressObserver
from chaos.engine.scheduler import FaultScheduler, FaultState
from chaos.engine.signals import Interrupted, RunInterrupted, signals_ignored, signals_interrupt
from chaos.engine.states import PHASE_TRANSITIONS, EndReason, Phase, move
from chaos.events import Ev
from chaos.golden import (
    CONTROL_FILE,
    ControlRunner,
    GoldenCache,
    GoldenRunner,
    TriggerCannotFire,
    golden_missed_progress,
    no_golden_why,
    torch_version,
    trigger_problems,
    wants_golden,
)
from chaos.golden import (
    on_cluster as golden_on_cluster,
)
from chaos.history import HistoryWriter, loads_line
from chaos.loading import load_scenario, resolve_scenario_path
from chaos.plan import Plan, build_plan
from chaos.progress_regex import ProgressRegexMissed, ProgressRegexTooSlow
from chaos.reports import write_report
from chaos.reports.renderer import Renderer, RenderFailed
from chaos.run_result import RunResult
from chaos.runtimes import create_runtime
from chaos.runtimes.base import Runtime
from chaos.scenario import CommandWorkload, Scenario
from chaos.storage.layer import StorageLayer, why_layer
from chaos.storage.layer import choose as choose_layer
from chaos.version import __version__

log = logging.getLogger(__name__)
POLL_S = 0.02
DEFAULT_STEPS = 400  # the shipped workloads' default ``steps`` (for the live view's progress bar)


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
    phase: Phase
    log: list[str] = field(default_factory=list)
    # while the newest disruptive-looking fault has had no step after it: what it was, and seconds since
    no_step_since: tuple[str, float] | None = None
    # a golden or control run's own progress, shown while the run waits for it ("golden" / "control")
    reference: str | None = None


# What new_run_id makes (the scenario name's pattern in the middle): what `chaos cleanup --run-id` accepts, since
# an empty or partial id would match every run's objects (the netns names carry only the last six characters).
RUN_ID = re.compile(r"\d{8}-\d{6}-[A-Za-z0-9_.-]+-[0-9a-f]{6}")


def new_run_id(scenario: Scenario) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{uuid.uuid4().hex[:6]}"


def environment(runtime: Runtime, plan: Plan, storage_layer: str = "off",
                storage_why: str | None = None, storage_on_node_hosts: bool = False,
                storage_passthrough: bool = False) -> dict[str, Any]:
    """``run_started.environment``; ``storage_passthrough`` (only when on): the checkpoint bytes went through the
    kernel's FUSE passthrough, not the server (a reader of timings knows which path was measured)."""
    return {
        "torch_chaos": __version__, "torch": torch_version(), "python": platform.python_version(),
        "platform": platform.platform(), "cpus": os.cpu_count(), **runtime.describe(),
        "mode": plan.scenario.cluster.mode, **(plan.launcher.describe() if plan.launcher else {}),
        "elastic_settings": plan.elastic, "storage_layer": storage_layer,
        **({"storage_layer_why": storage_why} if storage_why else {}),
        **({"storage_layer_on": "node hosts"} if storage_on_node_hosts else {}),
        **({"storage_passthrough": True} if storage_passthrough else {}),
    }


class RunParts:
    """Everything one run creates, made in one go: the run directory, the runtime and plan, the history, and the
    parts the engine ticks. Creating it is the run's preparation (nothing is started yet)."""

    def __init__(self, scenario: Scenario, run_id: str, run_dir: Path, note: Callable[[str], None],
                 warn: Callable[[str], None] | None = None):
        run_dir.mkdir(parents=True, exist_ok=False)
        (run_dir / "logs").mkdir()
        events_path = run_dir / "events.jsonl"
        events_path.touch()
        acks_dir = Path(str(events_path) + ".acks")  # the probe waits for its held events to be acknowledged here
        acks_dir.mkdir()
        self.heartbeat = Heartbeat(acks_dir)
        self.runtime = create_runtime(scenario, run_id, str(run_dir))
        self.plan = build_plan(scenario, run_id, run_dir, self.runtime.addressing(scenario))
        self.runtime.launcher = self.plan.launcher  # it picks a node's workers (kill_worker) as the launcher says
        if self.plan.checkpoint_dir is not None:
            self.plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "scenario.yaml").write_text(
            yaml.safe_dump(scenario.model_dump(mode="json", exclude_none=True), sort_keys=False))
        (run_dir / "plan.yaml").write_text(yaml.safe_dump(self.plan.to_dict(), sort_keys=False))
        self.history = HistoryWriter(events_path)
        # Mounted just before the first node starts, unmounted after teardown (docs/design.md, "The storage layer").
        fuse_here, fuse_there = type(self.runtime).fuse_on_engine_host, type(self.runtime).fuse_on_node_hosts
        layer = choose_layer(scenario, fuse_here, fuse_there)
        self.storage = StorageLayer(layer, self.plan, self.history,
                                    {n.name: self.runtime.log_path(n.name) for n in self.plan.nodes},
                                    on_node_hosts=fuse_there and not fuse_here)
        if self.storage.on_node_hosts:
            self.runtime.storage_layer = self.storage  # it wraps every node's command in the layer on its host
        self.storage_why = why_layer(scenario, self.storage.kind, fuse_here)
        w = scenario.workload
        scraped = isinstance(w, CommandWorkload)  # a command may not use the probe: follow its output and files
        self.progress = ProgressObserver(
            events_path,
            LogProgress(w.progress_regex, {n.name: self.runtime.log_path(n.name) for n in self.plan.nodes},
                        self.history) if scraped else None,
            CheckpointWatcher(self.plan.checkpoint_dir, self.history) if scraped else None,
            note, now=time.time(), warn=warn,
            node_logs=NodeLogs({n.name: self.runtime.log_path(n.name) for n in self.plan.nodes}))
        self.nodes = NodeOrchestrator(self.runtime, self.plan, scenario.cluster.node_restart, self.history, note)
        self.faults = FaultScheduler(scenario.faults, self.runtime, self.plan, self.history, acks_dir, self.nodes,
                                     self.progress, note, storage=self.storage)
        self.end = EndDetector(scenario.limits, self.nodes, self.progress)
        self.target_steps = None if scraped else int(w.args.get("steps", DEFAULT_STEPS))
        self.channel: ChannelServer | None = None

    def open_channel(self) -> None:
        """Listen for the history channel where the plan says (after the runtime made its network): workload
        and agent events arrive there and are written by this engine's history writer, held ones acknowledged
        there (docs/design.md, "The history channel")."""
        if self.plan.channel is None:
            return
        host, port = parse_address(self.plan.channel)
        sock = self.runtime.channel_socket(host, port)
        self.channel = ChannelServer(sock, self.history.write_record,
                                     lambda **fields: self.history.write(Ev.CLOCK_SYNC, **fields),
                                     token=self.plan.channel_token,
                                     on_limit=lambda what, detail: self.history.write(Ev.CHANNEL_LIMIT, what=what,
                                                                                      detail=detail),
                                     loads=loads_line)  # orjson's parse (json's where it refuses): issue 36
        self.channel.start()
        self.faults.channel = self.channel

    def record_runtime(self) -> None:
        """Write what the runtime saw of its own machinery (Runtime.observe: a scheduler's view) to the history."""
        for record in self.runtime.observe():
            fields = dict(record)
            self.history.write(fields.pop("event"), **fields)

    def close_channel(self) -> None:
        if self.channel is not None:
            stats = self.channel.stop()
            self.history.write(Ev.CHANNEL_CLOSED, **stats)


def run_in_engine(scenario: Scenario, out_dir: Path, tell_parent: Callable[[str], None] | None = None,
                  on_update: Callable[[Snapshot], None] | None = None) -> Path:
    """How golden runs are run by default: a plain engine run; returns its run directory. ``tell_parent`` gets its
    warnings and ``on_update`` its live snapshots (the run that asked for it shows both: a golden run has no
    console of its own)."""
    engine = Engine(scenario, out_dir=out_dir, html_report=False, tell_parent=tell_parent, on_update=on_update)
    engine.run()
    return engine.run_dir


class Engine:
    """Runs one scenario: ``Engine(scenario).run()`` returns its result once the run is torn down.

    ``golden`` computes the fault-free reference summary for a scenario (default: the shared
    :class:`~chaos.golden.GoldenCache`, which runs golden runs with a plain engine); ``control`` computes a control
    run's summary, a clean resume that measures the noise floor (default: the same cache when ``golden`` is the
    default too, else none: a stand-in golden runner gets no real control run behind its back); ``on_update``
    receives a :class:`Snapshot` at every tick (the live view).
    """

    def __init__(self, scenario: Scenario, out_dir: str | Path = "runs", run_id: str | None = None,
                 on_update: Callable[[Snapshot], None] | None = None, golden: GoldenRunner | None = None,
                 control: ControlRunner | None = None, html_report: bool = True,
                 tell_parent: Callable[[str], None] | None = None):
        self.scenario = scenario
        self.tell_parent = tell_parent  # a golden or control run's warnings go to the run that asked for it
        self.html_report = html_report  # report.html at the end (off for golden and control runs: no reader)
        self.run_id = run_id or new_run_id(scenario)
        self.run_dir = Path(out_dir).resolve() / self.run_id
        self.on_update = on_update
        self.log: list[str] = []
        cache = GoldenCache(functools.partial(run_in_engine, tell_parent=self._from_reference_run,
                                              on_update=self._reference_progress), on_wait=self.note,
                            cluster_out=Path(out_dir).resolve())
        self.golden: GoldenRunner = golden if golden is not None else cache
        self.control: ControlRunner | None = control if control is not None else (
            cache.control if golden is None else None)
        self.golden_summary: dict[str, Any] | None = None
        self._refused: Exception | None = None  # what the golden run showed the faulted run cannot do
        self.phase = Phase.PREPARING
        self.started = time.time()  # reset when the faulted run starts: limits count from there

    def note(self, text: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')} {text}")

    def warn(self, text: str) -> None:
        """A note the user must see while the run goes on, even when this is a golden or control run."""
        self.note(text)
        if self.tell_parent is not None:
            self.tell_parent(text)

    def _reference_name(self) -> str:
        return "golden" if self.phase is Phase.GOLDEN else "control"

    def _from_reference_run(self, text: str) -> None:
        self.note(f"{self._reference_name()} run: {text}")

    def _reference_progress(self, snapshot: Snapshot) -> None:
        """The golden or control run's live view, shown as this run's while it waits for it (its step of its
        steps), with this run's own log."""
        if self.on_update is not None:
            self.on_update(dataclasses.replace(snapshot, run_id=self.run_id, run_dir=self.run_dir, phase=self.phase,
                                               log=self.log[-8:], reference=self._reference_name()))

    def run(self) -> RunResult:
        require(self.scenario)  # before anything is created: a missing piece is advice, not a half-run
        renderer = Renderer() if self.html_report and Renderer.saves_time() else None
        try:
            return self._run(renderer)
        finally:
            if renderer is not None:
                renderer.close()

    def _run(self, renderer: Renderer | None) -> RunResult:
        parts = RunParts(self.scenario, self.run_id, self.run_dir, self.note, self.warn)
        self.started = time.time()
        end = End(EndReason.ERROR, "engine failed")
        with signals_interrupt():
            try:
                golden = self._golden(parts)
                self.started = time.time()  # the deadline counts from the faulted run, not the golden one
                parts.progress.begin(self.started)
                parts.history.write(Ev.RUN_STARTED, run_id=self.run_id, scenario=self.scenario.name,
                                    environment=environment(parts.runtime, parts.plan, parts.storage.kind,
                                                            parts.storage_why, parts.storage.on_node_hosts,
                                                            parts.storage.passthrough),
                                    plan=parts.plan.to_dict(), golden=golden)
                if self._refused is not None:
                    parts.faults.not_started = str(self._refused)
                    raise self._refused
                parts.runtime.prepare(parts.plan)
                # limits count from here: a scheduler's queue (salloc waiting for hosts) is not the job's start-up
                self.started = time.time()
                parts.progress.begin(self.started)
                parts.record_runtime()
                parts.open_channel()  # before the first node: its first event has somewhere to go
                parts.storage.start(parts.channel)  # before the first node: every process sees the mount
                parts.heartbeat.start()
                self._enter(Phase.RUNNING)
                parts.nodes.start_cluster()
                if renderer is not None:  # after the launch: it imports at nice 19 while the job runs
                    self._start_renderer(renderer)
                while (outcome := self._tick(parts)) is None:
                    time.sleep(POLL_S)
                end = outcome
            except (Interrupted, KeyboardInterrupt) as exc:
                # A stop during the golden run arrives as that run's RunInterrupted, already worded.
                why = str(exc) if isinstance(exc, RunInterrupted) else f"interrupted by {exc or 'SIGINT'}"
                end = End(EndReason.INTERRUPTED, why + (" (during the golden run)" if self.phase is Phase.GOLDEN
                                                         else ""))
                self.note(end.why)
            except (ProgressRegexTooSlow, ProgressRegexMissed, TriggerCannotFire) as exc:  # the scenario's: as is
                end = End(EndReason.ERROR, str(exc))
                self.note(end.why)
            except Exception as exc:  # an engine bug must still end in teardown and a result
                end = End(EndReason.ERROR, f"engine error: {type(exc).__name__}: {exc}", traceback.format_exc())
                self.note(end.why)
            finally:
                self._finish(parts, end)
        interrupted = end.reason is EndReason.INTERRUPTED
        if not interrupted and end.reason is EndReason.COMPLETED:
            interrupted = self._control(parts)
        asked = renderer is not None and self._ask_renderer(renderer)  # it analyses beside the engine
        analysis = analyze_run(self.run_dir)  # result.json and report.html: the same run directory's analysis
        result = RunResult(write_result(analysis), self.run_dir)
        if self.html_report:
            self._write_report(analysis, renderer if asked else None)
        if interrupted:
            raise RunInterrupted(result)
        return result

    def _start_renderer(self, renderer: Renderer) -> None:
        try:
            renderer.start()
            renderer.watch(self.run_dir)
        except OSError as exc:  # the report is drawn here instead
            log.info("report renderer not started (%s): the engine draws report.html itself", exc)

    def _ask_renderer(self, renderer: Renderer) -> bool:
        try:
            renderer.ask(self.run_dir)
            return True
        except RenderFailed as exc:
            log.info("report renderer not asked (%s): the engine draws report.html itself", exc)
            return False

    def _write_report(self, analysis: RunAnalysis, renderer: Renderer | None = None) -> Path | None:
        """report.html beside result.json, so that every run has one to open (before, none existed until `chaos
        report --format html`): the renderer's (chaos.reports.renderer), else drawn here. The verdict is
        result.json's: a report that cannot be drawn (a plot library error, a full disk) is logged and never
        fails the run."""
        if renderer is not None:
            try:
                return renderer.answer()
            except RenderFailed as exc:
                log.info("report renderer failed (%s): the engine draws report.html itself", exc)
                renderer.close()  # it writes nothing after this
        try:
            return write_report(analysis, "html", out_named_by_user=False)
        except Exception as exc:
            why = (f"report.html not written ({type(exc).__name__}: {exc}); the result stands, and "
                   f"`chaos report {self.run_dir} --format html` retries it")
            log.warning(why)
            self.note(why)
            return None

    def _golden(self, parts: RunParts) -> dict[str, Any] | None:
        """Run (or reuse) the fault-free reference and keep its summary in this run's directory, so that the run
        directory alone is enough to recompute the result."""
        if not wants_golden(self.scenario):
            if self.scenario.checks.golden:  # asked for, but none: say why, never "checks.golden is off"
                self.note(f"no golden run: {no_golden_why(self.scenario)}")
            return None
        self.note("golden run: the same job without faults (cached after the first time), "
                  + (f"on the {self.scenario.cluster.runtime} cluster itself" if golden_on_cluster(self.scenario)
                     else "beside the engine"))
        self._enter(Phase.GOLDEN)
        self._update(parts)
        summary = self.golden(self.scenario)
        self.golden_summary = summary
        (self.run_dir / "golden.json").write_text(json.dumps(summary, indent=1))
        self.note(f"golden run {'reused' if summary.get('cached') else 'done'}: {summary.get('run_dir')}")
        missed = golden_missed_progress(self.scenario, summary)
        problems, warnings = trigger_problems(self.scenario, summary)
        for warning in warnings:
            self.note(warning)
        # The faulted run would record nothing, or its fault would not be injected: said now, not after a second
        # run; raised once run_started (with the plan) is written, so result.json lists every planned fault.
        if missed is not None:
            self._refused = ProgressRegexMissed(f"the golden run recorded no training step, so the faulted run was "
                                                f"not started: {missed}")
        elif problems:
            self._refused = TriggerCannotFire(f"the faulted run was not started: {'; '.join(problems)}")
        if summary.get("trusted") is False:
            self.note(f"golden run not trusted: {summary.get('untrusted_why')}")
        return {"key": summary.get("key"), "run_dir": summary.get("run_dir"), "cached": summary.get("cached"),
                **({"where": w} if (w := summary.get("where")) else {})}  # absent from a summary cached before

    def _control(self, parts: RunParts) -> bool:
        """After a completed run whose losses differ from the golden run's by less than any noise band could
        allow: run (or reuse) the control run that measures a clean resume's noise, and keep its summary in
        ``control.json`` so the run directory alone recomputes the verdict. Returns whether the user stopped it."""
        if self.control is None or self.golden_summary is None:
            return False
        step = control_request(load_events(self.run_dir / "events.jsonl"), self.golden_summary,
                               self.scenario.checks.loss_rtol)
        if step is None:
            return False
        self.note(f"control run: the same job resumed once from step {step}, to measure a clean resume's noise")
        self._update(parts)  # the live view says what the wait is for
        try:
            with signals_interrupt():
                summary = self.control(self.scenario, step)
        except (Interrupted, KeyboardInterrupt) as exc:
            self.note(f"control run stopped ({exc or 'SIGINT'}): the golden comparison is not checked")
            return True
        except Exception as exc:  # the faulted run's result must still be written; the verdict says not checked
            self.note(f"control run failed: {type(exc).__name__}: {exc}; the golden comparison is not checked")
            return False
        (self.run_dir / CONTROL_FILE).write_text(json.dumps(summary, indent=1))
        self.note(f"control run {'reused' if summary.get('cached') else 'done'}: {summary.get('run_dir')}")
        if summary.get("trusted") is False:
            self.note(f"control run not trusted: {summary.get('untrusted_why')}")
        return False

    def _tick(self, parts: RunParts) -> End | None:
        now = time.time()
        parts.storage.poll()
        new_events = parts.progress.drain()
        parts.faults.fire_due(now, new_events)
        parts.faults.release(new_events)  # after firing: a held job resumes with its fault in place
        parts.faults.heal_due(now)
        parts.nodes.watch(now)
        parts.record_runtime()
        end = parts.end.check(now, self.started)
        self._update(parts)
        return end

    def _finish(self, parts: RunParts, end: End) -> None:
        """Teardown, each step on its own: one that raises (a runtime's teardown, a storage layer that will not
        unmount) is noted and recorded in the history, and the steps after it still run, so that storage,
        heartbeat, channel and history are always closed and the run always gets its result."""
        failed: list[dict[str, str]] = []

        def step(name: str, action: Callable[[], Any], quiet: bool = False) -> Any:
            try:
                return action()
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                if not quiet:
                    failed.append({"step": name, "why": why, "traceback": traceback.format_exc()})
                    self.note(f"teardown: {name} failed ({why})")
                return None

        # Further interrupts are ignored while cleaning: a second Ctrl-C must not leave faults or processes behind.
        with signals_ignored():
            step("drain", lambda: parts.progress.drain(final=True), quiet=True)  # bounded: stop signals are ignored
            step("close the history's tail", parts.progress.close, quiet=True)
            step("abandon pending faults", parts.faults.abandon_pending, quiet=True)
            step("record run_ended", lambda: parts.history.write(
                Ev.RUN_ENDED, reason=end.reason.value, why=end.why, max_step=parts.progress.max_step,
                **({"traceback": end.traceback} if end.traceback else {})))
            step("heal faults", parts.faults.heal_all)
            cleaned = step("runtime teardown", parts.runtime.teardown) or []
            if parts.plan.launcher is not None:  # what the launcher's nodes leave outside their trees (Ray's agents)
                cleaned += step("launcher cleanup",
                                lambda: type(parts.plan.launcher).cleanup(self.run_id, only_orphans=False)) or []
            step("record runtime", parts.record_runtime, quiet=True)  # what teardown saw (the allocation released)
            # after the nodes are gone: nothing holds a file open on the mount (`chaos cleanup` unmounts one left)
            step("storage layer stop (`chaos cleanup` unmounts it)", parts.storage.stop)
            step("heartbeat", parts.heartbeat.stop)
            step("close channel", parts.close_channel)  # the nodes are gone: what they sent is in, or in their spools
            step("record teardown", lambda: parts.history.write(
                Ev.TEARDOWN, killed=len(cleaned), **({"failed": failed} if failed else {})))
            step("close history", parts.history.close)
            self._enter(Phase.FINISHED)
            self._update(parts)

    def _enter(self, phase: Phase) -> None:
        self.phase = move(self.phase, phase, PHASE_TRANSITIONS)

    def _update(self, parts: RunParts) -> None:
        if self.on_update is None:
            return
        self.on_update(Snapshot(
            run_id=self.run_id, run_dir=self.run_dir, elapsed_s=time.time() - self.started,
            step=parts.progress.max_step, target_steps=parts.target_steps, restarts=parts.progress.restarts,
            nodes=list(parts.nodes.nodes.values()), faults=parts.faults.faults, phase=self.phase,
            log=self.log[-8:], no_step_since=self._no_step_since(parts)))

    @staticmethod
    def _no_step_since(parts: RunParts) -> tuple[str, float] | None:
        """The newest injected fault when no step has completed since it took effect (a running recovery timer for
        the live view): what it was and for how long; None once a step came after it."""
        injected = [f for f in parts.faults.faults if f.t_injected is not None]
        if not injected:
            return None
        newest = max(injected, key=lambda f: f.t_injected or 0.0)
        last_step = parts.progress.last_step_t
        assert newest.t_injected is not None
        if last_step is not None and last_step >= newest.t_injected:
            return None
        return f"{newest.spec.kind} on {newest.node or newest.spec.target}", time.time() - newest.t_injected


def run(scenario: Scenario | str | Path, out_dir: str | Path = "runs",
        on_update: Callable[[Snapshot], None] | None = None) -> RunResult:
    """Run a scenario (a model, or a path to its YAML) and return its result (as written to result.json)."""
    # A path is told from a model by its type: pytest's in-process sessions (pytester) may re-import chaos.scenario,
    # and a model built by the earlier import is then not an instance of this module's Scenario.
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(resolve_scenario_path(str(scenario)))
    return Engine(scenario, out_dir=out_dir, on_update=on_update).run()
