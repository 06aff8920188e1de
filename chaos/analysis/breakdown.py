"""Recovery breakdown: a fault's ``recovery_s`` split into the phases the history shows.

The phases, in order, and the marks that end them (docs/design.md, "Recovery breakdown"):

- detection: the fault, until the first agent acts on it (its monitor finds its workers failed, or nodes waiting
  to join, or a new agent begins a rendezvous): ``agent_*`` events, written by :mod:`chaos.agent_log`;
- rendezvous: until the last agent starts its workers for the round that trained next (``agent_workers_started``);
- worker start: spawn, interpreter and imports, until the new workers' last ``process_started`` (the probe);
- worker init: until the first ``checkpoint_load_started`` (the process group forms here in the reference workload;
  a script without the probe: the storage layer's first read of the new round);
- checkpoint load: until the last ``checkpoint_loaded``;
- first step: until the first step of a new worker (the end of ``recovery_s``).

A TensorFlow MultiWorkerMirroredStrategy job (``mode: tf-multiworker``) has no agent: the engine relaunches every
worker that failed. Its phases, in TF's terms (:func:`tf_phases`): detection, until the last worker of the old group
exited (the survivors' collectives failed on the lost peer: ``node_exited``); relaunch, until the last relaunched
worker's ``process_started`` (``node_restart.delay_s``, the interpreter); worker init, until the first
``checkpoint_load_started`` (importing TensorFlow, the strategy's cluster connect, the model); restore, until the last
``checkpoint_loaded`` (BackupAndRestore's backup); first step.

Under Ray (``launcher: ray``, mode "ray") the phases are Ray's, ended by the controller's lines the head's launcher
turns into ``ray_*`` events (:mod:`chaos.launchers.ray_node`) and by the job's own marks:

- detection: until Ray Train's controller decides on the failure (``ray_failure_detected``, "[FailurePolicy]
  RETRY"): its poll of the workers, or the GCS's health checks for a lost node;
- worker-group restart: until the new group is up (``ray_worker_group_started``: placement group, new actors, their
  process group);
- checkpoint restore: the training function's start, ``ray.train.get_checkpoint()`` and the load, until the last
  ``checkpoint_loaded``;
- first step.

A missing mark merges its phase into the next (their names joined by " + "), so the measured spans always add up
to ``recovery_s``; ``not_measured`` says which boundary is missing and why. The largest span is named with the
settings that shrink it (``largest``, ``advice``), citing the measured number and the values in force.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.analysis.ckpt_source import checkpoint_events
from chaos.analysis.load import of_kind, of_kinds, step_table
from chaos.analysis.result_model import FaultResult
from chaos.events import Ev, Source
from chaos.history import Event

DETECTION, RENDEZVOUS, WORKER_START = "detection", "rendezvous", "worker start (spawn, imports)"
WORKER_INIT, LOAD, FIRST_STEP = "worker init (process group)", "checkpoint load", "first step"
RESTART = "restart"  # a centralized job: the engine restarts it (no agent)
# A TensorFlow MultiWorkerMirroredStrategy job's phases (tf_phases)
TF_MODE = "tf-multiworker"
TF_DETECTION = "detection (the survivors' collectives fail)"
TF_RELAUNCH = "relaunch (node_restart delay, interpreter start)"
TF_INIT = "worker init (TensorFlow import, cluster connect)"
TF_RESTORE = "restore (BackupAndRestore's backup)"
RAY_RESTART, RAY_RESTORE = "worker-group restart", "checkpoint restore"  # Ray's phases (with DETECTION, FIRST_STEP)
_RAY_EVENTS = (Ev.RAY_FAILURE_DETECTED, Ev.RAY_WORKER_GROUP_STARTED)
_AGENT_ACTS = (Ev.AGENT_WORKERS_FAILED, Ev.AGENT_MEMBERSHIP_CHANGED, Ev.AGENT_RENDEZVOUS_STARTED)
_AGENT_EVENTS = (*_AGENT_ACTS, Ev.AGENT_RENDEZVOUS_COMPLETED, Ev.AGENT_WORKERS_STARTED)
_JOB_EVENTS = (Ev.PROCESS_STARTED, Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)
COMPARE_TIMEOUTS = ("chaos compare scenarios/compare/elastic-torchrun-defaults.yaml "
                    "scenarios/compare/elastic-tuned.yaml")


@dataclass
class RecoveryBreakdown:
    """One disruptive fault's ``recovery_s`` split into phases (see the module's docstring)."""

    fault: int  # the fault's id
    kind: str
    recovery_s: float | None
    phases: list[tuple[str, float | None]]  # (phase, or phases joined by " + " where a mark is missing; seconds)
    not_measured: list[dict[str, str]] = field(default_factory=list)  # {phase, why}: a boundary that is missing
    largest: dict[str, Any] | None = None  # {phase, seconds, share}
    advice: str | None = None  # the settings that shrink the largest phase, with the values in force
    agent_rounds: int | None = None  # rendezvous rounds the agents completed during the recovery
    scheduler: dict[str, Any] | None = None  # what Slurm did beside the phases (scheduler_part)
    restarted: bool = True  # False: the job did not restart, so there are no phases (one span to the next step)
    # the job's own first start, launch -> first step (start_floor): what any restart costs at the least
    floor_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """report.json's spelling (result.json carries :func:`breakdown_for_result`'s)."""
        return {"fault": self.fault, "kind": self.kind, "recovery_s": self.recovery_s,
                **({"agent_rounds": self.agent_rounds} if self.restarted else {}),
                "phases": self.phases, "not_measured": self.not_measured,
                "largest": self.largest, "advice": self.advice,
                **({"floor_s": self.floor_s} if self.floor_s is not None else {}),
                **({"scheduler": self.scheduler} if self.scheduler else {})}


def as_fault(fault: FaultResult | Mapping[str, Any]) -> FaultResult:
    """A fault as the typed model, from result.json's entry where that is what the caller has."""
    return fault if isinstance(fault, FaultResult) else FaultResult.from_dict(fault)


def recovery_breakdowns(events: list[Event],
                        faults: Sequence[FaultResult | Mapping[str, Any]]) -> list[RecoveryBreakdown]:
    """One breakdown per disruptive fault of ``faults`` (result.json's entries)."""
    typed = [as_fault(f) for f in faults]
    # The job's own marks. The storage layer's checkpoint_loaded is a load's first read, not its end: it only
    # marks where a load began, for a script without the probe (recovery_breakdown keeps it apart).
    marks = of_kinds(events, *_AGENT_EVENTS, *_RAY_EVENTS) + of_kind(events, Ev.PROCESS_STARTED) + [
        e for e in checkpoint_events(events, *_JOB_EVENTS[1:]) if e.get("source") != Source.STORAGE] + [
        e for e in of_kind(events, Ev.CHECKPOINT_LOADED) if e.get("source") == Source.STORAGE]
    settings = _settings(events)
    if settings.get("mode") == TF_MODE:  # the old group's end is its nodes' exits (tf_phases)
        marks += of_kind(events, Ev.NODE_EXITED)
    out = [recovery_breakdown(marks, f, settings) for f in typed if f.counts_for_recovery]
    by_id = {f.id: f for f in typed}
    starts = sorted(f.t_injected for f in typed if f.counts_for_recovery and f.t_injected is not None)
    for b in out:
        fault = by_id[b.fault]
        t_f = fault.t_injected
        until = next((t for t in starts if t_f is not None and t > t_f), None)
        part = scheduler_part(events, fault, until)
        if part:
            b.scheduler = part
        if b.restarted:
            b.floor_s = start_floor(events)
    return out


def start_floor(events: list[Event]) -> float | None:
    """The job's own first start: from the first node's launch to the first completed step, in this run.

    Why: a restart does at least what a start does (processes, ``import torch``, the rendezvous or process group,
    the first step), so this is the floor a recovery sits on; beside it a reader sees how much of the recovery the
    job's settings (detection, timeouts, delays) add. Measured on the run itself, the observer included, so it is
    the floor under the same conditions. None without a launch or a step."""
    launches = [e["t"] for e in of_kind(events, Ev.NODE_STARTED)]
    steps = step_table(events).values("t", 0.0)
    if not launches or not len(steps):
        return None
    first = min(launches)
    after = [t for t in steps if t >= first]
    return min(after) - first if after else None


def scheduler_part(events: list[Event], fault: FaultResult | Mapping[str, Any],
                   until: float | None = None) -> dict[str, Any] | None:
    """What the scheduler itself did after the fault (the slurm runtime's ``slurm_*`` events), beside the phases:
    it overlaps them rather than splitting them (Slurm may mark a lost host down after the survivors recovered).

    Only what concerns the fault's own node counts, up to ``until`` (the next disruptive fault): the host its step
    ran on when the fault came, and that node's replacement step; another host going down, or a later fault's
    replacement, is not this fault's.

    ``host_not_responding_after_s``: from the fault until Slurm first said that host does not respond (``alloc*``,
    ``idle*``: its first sign); ``host_down_after_s``: until it first marked it down (its own detection: the lost
    node's srun ends only then);
    ``replacement_srun_after_s``: from the fault until the engine ran the replacement's srun (the restart policy's
    delay, the engine's part); ``replacement_step_s``: from that srun until Slurm listed the step as running (the
    scheduler's part of starting it). None without such Slurm events after the fault."""
    fault = as_fault(fault)
    t_f, node = fault.t_injected, fault.target
    if t_f is None or node is None:
        return None
    end = until if until is not None else float("inf")
    host = _host_of(events, str(node), t_f)
    part: dict[str, Any] = {}
    states = [e for e in of_kind(events, Ev.SLURM_NODE_STATE) if t_f < e["t"] < end and e.get("host") == host]
    silent = [e for e in states if str(e.get("state", "")).endswith("*")]
    if silent:  # Slurm's first sign: the host stopped answering (``*``), before it is marked down
        part["host_not_responding_after_s"] = silent[0]["t"] - t_f
    downs = [e for e in states if str(e.get("state", "")).startswith(("down", "fail", "drain"))]
    if downs:
        part["host_down_after_s"] = downs[0]["t"] - t_f
        part["host_down"] = downs[0].get("host")
        part["host_down_state"] = downs[0].get("state")
    steps = [e for e in of_kind(events, Ev.SLURM_STEP_STARTED) if e.get("replacement") and e.get("node") == node
             and t_f <= e["t"] - float(e.get("after_s", 0)) < end]
    if steps:
        first = steps[0]
        part["replacement_srun_after_s"] = first["t"] - float(first.get("after_s", 0)) - t_f
        part["replacement_step_s"] = float(first.get("after_s", 0))
        part["replacement_host"] = first.get("host")
    return part or None


def _host_of(events: list[Event], node: str, t: float) -> str | None:
    """The host ``node``'s step ran on at ``t``: its last step start before then, else its first placement."""
    host = None
    for e in of_kind(events, Ev.SLURM_ALLOCATED)[:1]:
        host = (e.get("nodes") or {}).get(node)
    for e in of_kind(events, Ev.SLURM_STEP_STARTED):
        if e.get("node") == node and e["t"] - float(e.get("after_s", 0)) <= t:
            host = e.get("host")
    return host


def _settings(events: list[Event]) -> dict[str, Any]:
    """The elastic settings in force (run_started's environment), for the advice."""
    for e in of_kind(events, Ev.RUN_STARTED)[:1]:
        env = e.get("environment") or {}
        # the launcher's own words for who restarts and what bounds its phases (Launcher.describe), so a launcher
        # the analysis does not know is still explained from the history alone
        return {"mode": env.get("mode"), **(env.get("elastic_settings") or {}),
                **({"orchestrator": env["orchestrator"]} if env.get("orchestrator") else {}),
                **({"levers": env["levers"]} if isinstance(env.get("levers"), dict) else {})}
    return {}


def marks_between(events: list[Event], t_f: float, end: float) -> Callable[..., list[float]]:
    """``times(*names, source=None)``: the sorted times of those events in ``(t_f, end]``; ``source`` None means any
    writer but the storage layer (its reads mark where a load began, kept apart by the callers)."""

    def times(*names: Ev, source: str | None = None) -> list[float]:
        return sorted(e["t"] for e in events if e.get("event") in names and t_f < e["t"] <= end
                      and (e.get("source") != Source.STORAGE if source is None else e.get("source") == source))
    return times


def recovery_breakdown(events: list[Event], fault: FaultResult,
                       settings: dict[str, Any] | None = None) -> RecoveryBreakdown:
    """Split one fault's recovery_s at the marks of ``events`` (agent, process and checkpoint events)."""
    settings = settings or {}
    recovery_s = fault.recovery_s
    out = RecoveryBreakdown(fault.id, fault.kind, recovery_s, [("no restart: until the next step", recovery_s)],
                            restarted=False)
    if not fault.restarted or recovery_s is None or fault.t_injected is None:
        return out
    out.restarted = True
    t_f = fault.t_injected
    end = t_f + recovery_s

    times = marks_between(events, t_f, end)

    if settings.get("mode") == "ray" and times(*_RAY_EVENTS):
        return _ray_breakdown(out, events, times, t_f, end, settings)
    agent = times(*_AGENT_EVENTS)
    out.agent_rounds = _rounds(events, t_f, end)
    if not agent and settings.get("mode") == TF_MODE:
        out.phases, out.not_measured = tf_phases(events, t_f, end)
        out.largest = _largest(out.phases, recovery_s)
        out.advice = _advice(out.largest, settings, out.agent_rounds) if out.largest else None
        return out
    if not agent:
        out.phases = _legacy_phases(times, t_f, end, settings.get("mode"))
        second = RENDEZVOUS if _elastic(settings.get("mode")) else RESTART
        out.not_measured = [{"phase": f"{DETECTION}, {second}", "why": _no_agent_why(settings, events)}]
        if not times(Ev.PROCESS_STARTED, source=Source.WORKLOAD):
            out.not_measured.append({"phase": "worker start", "why": "the script reports no process_started "
                                     "(no probe): its workers' start is not marked"})
        out.largest = _largest(out.phases, recovery_s)
        out.advice = _advice(out.largest, settings, out.agent_rounds) if out.largest else None
        return out

    # Each boundary: (phase it ends, its time or None, why it is missing).
    acts = times(*_AGENT_ACTS)
    detect = acts[0] if acts else None
    started = [t for t in times(Ev.AGENT_WORKERS_STARTED) if detect is None or t >= detect]
    t_rdzv = started[-1] if started else None
    after = t_rdzv if t_rdzv is not None else (detect if detect is not None else t_f)
    procs = [t for t in times(Ev.PROCESS_STARTED, source=Source.WORKLOAD) if t >= after]
    t_start = procs[-1] if procs else None
    load_started = [t for t in times(Ev.CHECKPOINT_LOAD_STARTED) if t >= (t_start or after)]
    t_init = load_started[0] if load_started else None
    # a script without the probe: the storage layer's first read of the new round is where its load began
    reads = [t for t in times(Ev.CHECKPOINT_LOADED, source=Source.STORAGE) if t >= (t_start or after)]
    if t_init is None and reads and not times(Ev.CHECKPOINT_LOADED):
        t_init = reads[0]
    loaded = [t for t in times(Ev.CHECKPOINT_LOADED) if t >= (t_init or t_start or after)]
    t_load = loaded[-1] if loaded else None
    no_probe = not times(Ev.PROCESS_STARTED, source=Source.WORKLOAD)
    boundaries: list[tuple[str, float | None, str]] = [
        (DETECTION, detect, "no agent acted on this fault before the workers restarted"),
        (RENDEZVOUS, t_rdzv, "no agent_workers_started after the agents acted"),
        (WORKER_START, t_start, "the script reports no process_started (no probe): its workers' start is not "
                                "marked" if no_probe else "no process_started after the agents started workers"),
        (WORKER_INIT, t_init, "no checkpoint_load_started (the script does not report its loads through the "
                              "probe, or it started from scratch), and the storage layer saw no read"),
        (LOAD, t_load, "the storage layer sees a load's first read, not its end (no probe)" if reads else
         "no checkpoint_loaded after the load began"),
    ]
    phases, not_measured = cut_phases(boundaries, t_f, end)
    out.phases, out.not_measured = phases, not_measured
    out.largest = _largest(phases, recovery_s)
    out.advice = _advice(out.largest, settings, out.agent_rounds) if out.largest else None
    return out


def cut_phases(boundaries: Sequence[tuple[str, float | None, str]], t_f: float, end: float,
               early: str | None = None) -> tuple[list[tuple[str, float | None]], list[dict[str, str]]]:
    """Cut ``t_f .. end`` at each boundary ``(phase it ends, its time or None, why it is missing)``, in order; a
    missing mark (or one before the previous, said by ``early`` where that has a cause of its own) merges its phase
    into the next, so the spans always add up; the last span is the first step's."""
    phases: list[tuple[str, float | None]] = []
    not_measured: list[dict[str, str]] = []
    pending: list[str] = []
    t = t_f
    for name, mark, why in boundaries:
        pending.append(name)
        if mark is None or mark < t:
            not_measured.append({"phase": name, "why": why if mark is None or early is None else early})
            continue
        phases.append((" + ".join(pending), mark - t))
        pending, t = [], mark
    phases.append((" + ".join([*pending, FIRST_STEP]), end - t))
    return phases, not_measured


def tf_phases(events: list[Event], t_f: float, end: float) -> tuple[list[tuple[str, float | None]],
                                                                     list[dict[str, str]]]:
    """A MultiWorkerMirroredStrategy group's recovery from a lost worker, split in TF's terms (the module's
    docstring): the old group is gone when its last worker exited (the lost one at the fault, the survivors when
    their next collective failed), the new one starts when its last worker is relaunched (the group can step only
    once every worker joined), then TensorFlow's start, the backup's restore, the first step."""

    times = marks_between(events, t_f, end)

    # a node whose exit was followed by its relaunch within the recovery: the old group's workers
    exits = sorted(e["t"] for e in events if e.get("event") == Ev.NODE_EXITED and t_f < e["t"] <= end
                   and e.get("code") not in (0, None) and e.get("role") != "store")
    t_detect = exits[-1] if exits else None
    after = t_detect if t_detect is not None else t_f
    # a print-only script's process_started is inferred at its first printed step: it marks no start
    procs = [t for t in times(Ev.PROCESS_STARTED, source=Source.WORKLOAD) if t >= after]
    t_relaunch = procs[-1] if procs else None
    load_started = [t for t in times(Ev.CHECKPOINT_LOAD_STARTED) if t >= (t_relaunch or after)]
    t_init = load_started[0] if load_started else None
    # a script without the probe: the storage layer's first read of the backup is where its restore began
    reads = [t for t in times(Ev.CHECKPOINT_LOADED, source=Source.STORAGE) if t >= (t_relaunch or after)]
    if t_init is None and reads and not times(Ev.CHECKPOINT_LOADED):
        t_init = reads[0]
    loaded = [t for t in times(Ev.CHECKPOINT_LOADED) if t >= (t_init or t_relaunch or after)]
    t_restore = loaded[-1] if loaded else None
    boundaries = [
        (TF_DETECTION, t_detect, "no node exited non-zero after the fault (a survivor that hung on its collective "
                                 "instead of failing, or a history without node_exited events)"),
        (TF_RELAUNCH, t_relaunch, "the script reports no process_started (no probe): its workers' start is not "
                                  "marked"),
        (TF_INIT, t_init, "no checkpoint_load_started (the script does not report its restore through the probe, "
                          "or the relaunched group started from scratch), and the storage layer saw no read"),
        (TF_RESTORE, t_restore, "the storage layer sees a restore's first read, not its end (no probe)" if reads
         else "no checkpoint_loaded after the restore began"),
    ]
    phases, not_measured = cut_phases(boundaries, t_f, end)
    return phases, not_measured


def _ray_breakdown(out: RecoveryBreakdown, events: list[Event], times: Any, t_f: float, end: float,
                   settings: dict[str, Any]) -> RecoveryBreakdown:
    """Ray's phases (the module's docstring): the controller's decision, the new group up, the last load."""
    detected = [e for e in events if e.get("event") == Ev.RAY_FAILURE_DETECTED and t_f < e["t"] <= end]
    detect = detected[0]["t"] if detected else None
    started = [t for t in times(Ev.RAY_WORKER_GROUP_STARTED) if t >= (detect or t_f)]
    t_group = started[0] if started else None
    loaded = [t for t in times(Ev.CHECKPOINT_LOADED) if t >= (t_group or detect or t_f)]
    reads = times(Ev.CHECKPOINT_LOADED, source=Source.STORAGE)
    no_probe = not times(Ev.PROCESS_STARTED, source=Source.WORKLOAD)
    boundaries: list[tuple[str, float | None, str]] = [
        (DETECTION, detect, "no \"[FailurePolicy]\" line of Ray Train's controller reached the driver's output "
                            "between the fault and the first new step"),
        (RAY_RESTART, t_group, "no \"Started training worker group\" line of the controller after its decision"),
        (RAY_RESTORE, loaded[-1] if loaded else None,
         "the storage layer sees a load's first read, not its end, and the script reports no loads (no probe)"
         if reads and no_probe else "the script reports no checkpoint_loaded (no probe)" if no_probe else
         "no checkpoint_loaded after the new group started (it started from scratch?)"),
    ]
    phases, not_measured = cut_phases(boundaries, t_f, end, early=(
        "its mark came before the previous one (a controller line is stamped when the driver printed it, after "
        "Ray's log forwarding)"))
    counted = {k: detected[0][k] for k in ("error_count", "max_failures") if detected and k in detected[0]}
    out.phases, out.not_measured = phases, not_measured
    out.largest = _largest(phases, out.recovery_s or 0.0)
    if out.largest:
        out.advice = _advice(out.largest, {**settings, **{f"ray_{k}": v for k, v in counted.items()}}, None)
    return out


def breakdown_for_result(b: RecoveryBreakdown) -> dict[str, Any]:
    """A breakdown as result.json carries it: phases as objects, the advice left to the reports."""
    return {"phases": [{"phase": name, "seconds": s} for name, s in b.phases],
            "not_measured": b.not_measured, "largest": b.largest, "agent_rounds": b.agent_rounds,
            **({"floor_s": b.floor_s} if b.floor_s is not None else {}),
            **({"scheduler": b.scheduler} if b.scheduler else {})}


def _legacy_phases(times: Any, t_f: float, end: float, mode: str | None) -> list[tuple[str, float | None]]:
    """Without agent events (a history from before chaos.agent_log, a centralized job): the job's marks only.

    A print-only job's ``process_started`` is inferred at its first printed step, after its loads: it marks no
    start, so its whole recovery is one span.
    """
    marks = [("worker start", times(Ev.PROCESS_STARTED, source=Source.WORKLOAD)[:1]),
             ("worker init (imports, process group)", times(Ev.CHECKPOINT_LOAD_STARTED)[:1]),
             (LOAD, times(Ev.CHECKPOINT_LOADED)[-1:])]
    head = [DETECTION, RENDEZVOUS if _elastic(mode) else RESTART]
    phases: list[tuple[str, float | None]] = []
    t = t_f
    for name, mark in marks:
        head.append(name)
        if mark and mark[0] >= t:
            phases.append((" + ".join(head), mark[0] - t))
            t, head = mark[0], []
    phases.append((" + ".join([*head, FIRST_STEP]), end - t))
    return phases


def _elastic(mode: str | None) -> bool:
    """Whether the job ran under torchrun's elastic agents (a history without a mode is an elastic one: the
    recordings from before the mode was written)."""
    return mode in (None, "elastic")


def _no_agent_why(settings: dict[str, Any], events: list[Event]) -> str:
    if settings.get("mode") == "centralized":
        return "a centralized job has no elastic agent: the engine restarts it, so detection and restart are one"
    if settings.get("mode") == "ray":
        return ("no ray_* event of Ray Train's controller fell between this fault and the first new step (a history "
                "from before chaos.launchers.ray_node read the driver's output, or the controller's lines changed), "
                "so detection and the worker group's restart are one span")
    if not _elastic(settings.get("mode")):
        return (f"a {settings.get('mode')} job has no torchrun agent: "
                f"{settings.get('orchestrator') or 'its launcher'} restarts it, and the history marks no moment "
                "between the detection and the restart, so they are one span")
    if not of_kinds(events, *_AGENT_EVENTS):
        return ("the history has no agent events (recorded before torch-chaos started torchrun through "
                "chaos.agent_log, or torchrun's log format changed)")
    return "no agent event fell between this fault and the first step after it"


def _rounds(events: list[Event], t_f: float, end: float) -> int | None:
    """Rendezvous rounds the agents completed during the recovery (the most any one agent did), None without."""
    per_node: dict[str, int] = {}
    for e in events:
        if e.get("event") == Ev.AGENT_RENDEZVOUS_COMPLETED and t_f < e["t"] <= end:
            per_node[str(e.get("node"))] = per_node.get(str(e.get("node")), 0) + 1
    return max(per_node.values()) if per_node else None


def _largest(phases: list[tuple[str, float | None]], recovery_s: float) -> dict[str, Any] | None:
    measured = [(name, s) for name, s in phases if s is not None]
    if not measured or not recovery_s or recovery_s <= 0:
        return None
    name, seconds = max(measured, key=lambda p: p[1])
    return {"phase": name, "seconds": seconds, "share": seconds / recovery_s}


# The settings that bound each phase (plan.yaml's elastic_settings keys, the scenario's min_nodes and
# node_restart.delay_s): what a comparison varies to shrink it. Worker start, checkpoint load and the first step have
# none (imports, storage, warm-up).
PHASE_SETTINGS: dict[str, tuple[str, ...]] = {
    DETECTION: ("keep_alive_interval_s", "keep_alive_max_attempt", "process_group_timeout_s"),
    RENDEZVOUS: ("last_call_timeout_s", "join_timeout_s", "min_nodes"),
    RESTART: ("node_restart.delay_s",),
    WORKER_INIT: ("process_group_timeout_s", "share_rendezvous_store"),
    TF_RELAUNCH: ("node_restart.delay_s",),
}
# What shrinks a phase that no setting bounds (the short form of _lever).
PHASE_COST = {WORKER_START: "fewer or lazier imports, a warm file cache", LOAD: "a smaller checkpoint, faster storage",
              FIRST_STEP: "the first step's warm-up (allocation, lazy initialisation)",
              TF_DETECTION: "survivors that fail fast on a lost peer (CommunicationOptions.timeout_seconds bounds "
                            "one that waits)",
              TF_INIT: "TensorFlow's import and the strategy's cluster connect on every relaunched worker",
              TF_RESTORE: "a smaller backup, faster storage"}


def _canon(part: str) -> str:
    """A phase's name as PHASE_SETTINGS knows it (a history without agent events names them shorter)."""
    if part in (TF_DETECTION, TF_RELAUNCH, TF_INIT, TF_RESTORE):  # TF's own names, not torchrun's shorter ones
        return part
    for name in (WORKER_START, WORKER_INIT):
        if part.startswith(name.split(" (")[0]):
            return name
    return part


def phase_settings(phase: str, mode: str | None) -> list[str]:
    """The settings that bound a (possibly merged, "a + b") phase, in order; a centralized job's detection is the
    engine's poll (none)."""
    keys: list[str] = []
    for part in map(_canon, phase.split(" + ")):
        if part == DETECTION and not _elastic(mode):
            continue
        keys += [k for k in PHASE_SETTINGS.get(part, ()) if k not in keys]
    return keys


def phase_costs(phase: str) -> list[str]:
    """What shrinks the parts of a (possibly merged) phase that no setting bounds."""
    return [PHASE_COST[part] for part in map(_canon, phase.split(" + ")) if part in PHASE_COST]


def _advice(largest: dict[str, Any], settings: dict[str, Any], rounds: int | None) -> str:
    """What would shrink the largest span, citing its number and the settings in force in this run."""
    name, s = largest["phase"], largest["seconds"]
    text = f"{name} is the largest part: {s:.2f} s of the recovery ({100 * largest['share']:.0f}%)"
    parts = name.split(" + ")
    if len(parts) == 1:
        text += f"; what shrinks it: {_lever(parts[0], settings, rounds)}."
    else:
        text += ("; the history cannot split it (see what was not measured), so the lever of each part: "
                 + "; ".join(f"{part}: {_lever(part, settings, rounds)}" for part in parts) + ".")
    if (DETECTION in parts or RENDEZVOUS in parts) and _elastic(settings.get("mode")):
        text += (f" The effect of the elastic settings is measured by the same crash run with torchrun's defaults "
                 f"and with the tuned values: `{COMPARE_TIMEOUTS}` (or scenarios/elastic-default-timeouts.yaml "
                 f"beside scenarios/quickstart.yaml); compare their recovery breakdowns.")
    return text


def _lever(phase: str, settings: dict[str, Any], rounds: int | None) -> str:
    """The setting (or the cost) behind one phase, with the values in force in this run."""

    def val(key: str) -> str:
        v = settings.get(key)
        return f"{v} s in this run" if v is not None else "not recorded"

    levers = settings.get("levers") or {}
    if levers.get(phase):  # the launcher's words (Launcher.describe)
        said = str(levers[phase])
        if phase == RAY_RESTART and settings.get("ray_max_failures") is not None:
            said += (f" (this run: failure {settings.get('ray_error_count', '?')} of at most "
                     f"{settings['ray_max_failures']}, from the controller's line)")
        return said
    tf_lever = {TF_DETECTION: "detection", TF_RELAUNCH: "restart"}.get(phase)
    if tf_lever and levers.get(tf_lever):  # tf-multiworker's own words for its detection and relaunch
        return str(levers[tf_lever])
    if phase == TF_INIT:
        return ("importing TensorFlow and connecting the strategy's cluster on every relaunched worker (seconds of "
                "CPU each): the group steps only once its last worker is up, so a warm standby worker or fewer "
                "imports shrink it")
    if phase == TF_RESTORE:
        return "BackupAndRestore reading the last epoch's backup: a smaller model or faster storage"
    if phase == RAY_RESTART:
        return ("Ray Train's start of a new worker group (FailureConfig.max_failures allows it): placement group, new "
                "actors, their process group")
    if phase == RAY_RESTORE:
        return "the training function's start, ray.train.get_checkpoint() and the checkpoint's read"
    if phase == DETECTION and settings.get("mode") == "centralized":
        return "the engine sees the job's process exit at its next poll (a fraction of a second)"
    if phase == DETECTION:
        return (f"the agents notice dead workers at their monitor_interval (torchrun --monitor-interval); workers "
                f"that hang on a dead peer instead of failing wait for the process-group timeout "
                f"(process_group_timeout_s: {val('process_group_timeout_s')}); a dead agent is noticed after "
                f"keep_alive_interval_s x keep_alive_max_attempt ({val('keep_alive_interval_s')} x "
                f"{settings.get('keep_alive_max_attempt', 'not recorded')})")
    if phase == RENDEZVOUS:
        tip = (f"the round closes last_call_timeout_s after min_nodes joined (last_call_timeout_s: "
               f"{val('last_call_timeout_s')}; join_timeout_s: {val('join_timeout_s')}); a lower min_nodes lets "
               f"fewer nodes resume")
        if rounds and rounds > 1:
            tip += (f"; the agents went through {rounds} rounds (a node that arrives after a round closed restarts "
                    f"the workers again)")
        return tip
    if phase == RESTART:
        return "the engine restarts the job node_restart.delay_s after it died (the scenario's setting)"
    if phase.startswith("worker start"):
        return ("the interpreter's start and the script's imports (import torch and the rest) on every worker: fewer "
                "or lazier imports, a warm file cache, a local environment rather than a network filesystem")
    if phase.startswith("worker init"):
        return (f"the process group's setup (init_process_group: store connection, first collective), bounded by "
                f"its timeout (process_group_timeout_s: {val('process_group_timeout_s')})")
    if phase == LOAD:
        return "reading and restoring the checkpoint: a smaller checkpoint or faster storage"
    return "the first step after the restart (warm-up: allocation, lazy initialisation, compilation)"
