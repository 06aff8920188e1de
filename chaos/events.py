"""Every event of the history (``events.jsonl``): its name, who writes it, and what each field means.

This is the one place that names events. The probe (inside users' training scripts), the engine and analysis
all use these names; nothing else spells them as string literals. The module is standard-library only and
imports nothing from ``chaos``, so :mod:`chaos.probe` can use it inside any training process or container
without pulling in the rest of the package.

Each line of the history is one JSON object with at least ``t`` (host wall clock, seconds), ``source``
(:class:`Source`) and ``event`` (:class:`Ev`), plus the fields of its event declared below as ``TypedDict``s.
The declarations document the format and let a type checker follow a field through the code; nothing
validates a line at run time (a history from an older version, or from a user's script calling
``probe.emit`` with extra fields, must still be readable). A field marked ``NotRequired`` may be absent; readers
treat absence the way its comment says.

A reader gets each line as an :class:`Event`: one ``TypedDict`` of every field declared here, each typed as the
union of its declarations (tests/test_events.py keeps it exactly that). A reader in ``chaos`` that reads a key no
event declares fails tests/test_event_reads.py with its file and line, in the fast tier.

``Ev`` and ``Source`` are ``StrEnum``s: each member *is* its string (equal to it, same hash, serialised by
``json`` as the plain string), so ``e["event"] == Ev.STEP_COMPLETED`` works on parsed lines and writers can
pass members where strings are expected.
"""

import sys
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if sys.version_info >= (3, 11) or TYPE_CHECKING:
    from enum import StrEnum
    from typing import NotRequired
else:  # Python 3.10 (the probe runs in users' interpreters): same behaviour, stdlib only

    class StrEnum(str, Enum):
        """A member is its string: equal to it, same hash, written to JSON and formatted as it."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)

    class NotRequired:
        """Stand-in: on 3.10 the field reads as required in ``required_fields`` (only the tests ask)."""

        def __class_getitem__(cls, item: Any) -> Any:
            return item


class Source(StrEnum):
    """Who wrote a line."""

    ENGINE = "engine"  # the chaos engine (orchestration, faults, the run's start and end)
    WORKLOAD = "workload"  # a training process, through chaos.probe
    PROGRESS = "progress"  # the engine on behalf of a workload without the probe (its printed progress, its files)
    STORAGE = "storage"  # the storage layer serving the checkpoint directory (docs/design.md, "The storage layer")
    AGENT = "agent"  # torchrun's elastic agent on a node, through chaos.agent_log (its own log records)
    RAY = "ray"  # Ray Train's controller, its lines in the driver's output read by chaos.launchers.ray_node


class Ev(StrEnum):
    """Every event name. Grouped by writer; the field declarations below say what each carries."""

    # -- engine (source "engine")
    RUN_STARTED = "run_started"
    RUN_ENDED = "run_ended"
    TEARDOWN = "teardown"
    CLOCK_SYNC = "clock_sync"
    CHANNEL_CLOSED = "channel_closed"
    CHANNEL_LIMIT = "channel_limit"
    NODE_STARTED = "node_started"
    NODE_EXITED = "node_exited"
    FAULT_INJECTED = "fault_injected"
    FAULT_SKIPPED = "fault_skipped"
    FAULT_FAILED = "fault_failed"
    FAULT_NOT_REACHED = "fault_not_reached"
    FAULT_HEALED = "fault_healed"
    FAULT_HEAL_FAILED = "fault_heal_failed"
    OOM_KILLED = "oom_killed"
    FAULT_NODE_REPLACED = "fault_node_replaced"
    # -- the Slurm runtime's view of the scheduler (source "engine"; docs/design.md, "The Slurm runtime")
    SLURM_ALLOCATED = "slurm_allocated"
    SLURM_NODE_STATE = "slurm_node_state"
    SLURM_STEP_STARTED = "slurm_step_started"
    SLURM_RELEASED = "slurm_released"
    STORAGE_SWEPT = "storage_swept"
    # -- a hang (source "workload" from the probe for a main-thread hang, "engine" for a stopped process)
    HANG_STARTED = "hang_started"
    HANG_RELEASED = "hang_released"
    # -- workload (source "workload" through chaos.probe; PROCESS_STARTED and STEP_COMPLETED also "progress")
    PROCESS_STARTED = "process_started"
    STEP_COMPLETED = "step_completed"
    CHECKPOINT_SAVE_STARTED = "checkpoint_save_started"
    CHECKPOINT_WRITE_PROGRESS = "checkpoint_write_progress"
    CHECKPOINT_SAVE_FINISHED = "checkpoint_save_finished"
    CHECKPOINT_LOAD_STARTED = "checkpoint_load_started"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    CHECKPOINT_DELETED = "checkpoint_deleted"
    CHECKPOINT_REJECTED = "checkpoint_rejected"
    RUN_FINISHED = "run_finished"
    FL_ROUND = "fl_round"
    # -- progress (source "progress": the engine watching a workload's checkpoint directory)
    CHECKPOINT_SEEN = "checkpoint_seen"
    # -- storage (source "storage": the storage layer; it also writes the CHECKPOINT_* events above for any script)
    STORAGE_OP_FAILED = "storage_op_failed"
    STORAGE_OP_STALLED = "storage_op_stalled"
    # -- agent (source "agent": torchrun's elastic agent, its log records turned into events by chaos.agent_log)
    AGENT_WORKERS_FAILED = "agent_workers_failed"
    AGENT_MEMBERSHIP_CHANGED = "agent_membership_changed"
    AGENT_RENDEZVOUS_STARTED = "agent_rendezvous_started"
    AGENT_RENDEZVOUS_COMPLETED = "agent_rendezvous_completed"
    AGENT_WORKERS_STARTED = "agent_workers_started"
    AGENT_WORKERS_SUCCEEDED = "agent_workers_succeeded"
    # -- ray (source "ray": Ray Train's controller, its lines in the driver's output turned into events on the head)
    RAY_FAILURE_DETECTED = "ray_failure_detected"
    RAY_WORKER_GROUP_STARTING = "ray_worker_group_starting"
    RAY_WORKER_GROUP_STARTED = "ray_worker_group_started"


class EndReason(StrEnum):
    """``run_ended.reason``: why the engine stopped the run (analysis maps it to a verdict)."""

    COMPLETED = "completed"  # every node finished, or one did and the others were stopped after a grace period
    FAILED = "failed"  # every node exited without finishing
    DEADLINE = "deadline"  # limits.deadline_s passed
    RESTART_LOOP = "restart_loop"  # too many unprovoked worker restarts without progress
    HUNG = "hung"  # no step within startup_timeout_s, or none for stall_timeout_s
    ERROR = "error"  # an engine error (the run still ends in teardown and a result)
    INTERRUPTED = "interrupted"  # SIGINT / SIGTERM
    FAILED_TO_START = "failed_to_start"  # workers kept failing (or every node died) before any training step


# When the storage layer emits checkpoint_write_progress: a save's written bytes first pass FIRST, then every EVERY
# (the probe's own checkpoint_write_progress is the job's call). Said in the trigger's description and in why a
# write-progress trigger never fired on a job whose checkpoints are smaller.
WRITE_PROGRESS_FIRST_BYTES = 1 << 20
WRITE_PROGRESS_EVERY_BYTES = 16 << 20

# Workload events a fault may be triggered on (``on: {event: ...}`` in a scenario) and a probe may pause after.
TriggerEvent = Literal["checkpoint_save_started", "checkpoint_write_progress", "checkpoint_save_finished",
                       "checkpoint_loaded", "process_started"]
# The subset ``chaos explore`` generates triggers from: the moments around a checkpoint write.
ExploreTriggerEvent = Literal["checkpoint_save_started", "checkpoint_write_progress", "checkpoint_save_finished"]


# ------------------------------------------------------------------------------------------ common fields

class Line(TypedDict):
    """Fields of every line."""

    t: float  # host wall clock (time.time()) when written; the history is ordered by it
    source: str  # a Source
    event: str  # an Ev
    # the sender's own clock, kept when the history channel rewrote ``t`` with the engine's (see ClockSync)
    t_sender: NotRequired[float]


class WorkloadLine(Line):
    """Fields the probe adds to every workload event (from the process's environment and set_context)."""

    node: str  # CHAOS_NODE: the node the process runs on ("local" outside chaos)
    pid: int | str  # OS pid; "<node>:<n>" for the engine's inferred process of a print-only job
    rank: NotRequired[int]  # RANK (absent: a single process, treated as rank 0)
    local_rank: NotRequired[int]  # LOCAL_RANK
    world_size: NotRequired[int]  # WORLD_SIZE (absent: 1)
    restart: NotRequired[int]  # TORCHELASTIC_RESTART_COUNT of the node's agent
    incarnation: NotRequired[str | int]  # id the ranks of one worker round agreed on (probe.set_context): lineage
    id: NotRequired[str]  # present when the probe holds the job after this event until the engine acknowledges it


# ------------------------------------------------------------------------------------------ engine events

class RunStarted(Line):
    """The faulted run begins (after any golden run)."""

    run_id: str
    scenario: str  # the scenario's name
    environment: dict[str, Any]  # host, versions, runtime and elastic settings (copied to result.json)
    plan: dict[str, Any]  # the resolved plan: nodes, commands, fault timeline
    # {key, run_dir, cached, where} of the fault-free reference (where: beside the engine or on the cluster), or None
    golden: dict[str, Any] | None


class RunEnded(Line):
    """The engine stopped watching the run (written before teardown)."""

    reason: str  # an EndReason
    why: str  # one sentence for people
    max_step: int  # highest global step seen
    traceback: NotRequired[str]  # an engine error's traceback (the engine's bug, for whoever debugs it)


class Teardown(Line):
    killed: int  # processes / containers the runtime removed
    # teardown steps that raised (the runtime's teardown, closing the channel ...): {step, why, traceback}; the
    # steps after each still ran. Absent when every step succeeded.
    failed: NotRequired[list[dict[str, str]]]


class ClockSync(Line):
    """One clock measurement of a sender on the history channel (chaos/channel.py): at its connect, then
    periodically. ``offset_s`` is what to add to the sender's clock to get the engine's (NTP style, error at most
    half of ``rtt_s``); ``corrected``: the engine rewrote this sender's ``t`` with it (the offset was measurably
    not zero), keeping the sender's own as ``t_sender``."""

    sender: str  # "<node>:<pid>:<nonce>": one process
    node: str
    pid: int | None
    offset_s: float
    rtt_s: float
    corrected: bool
    at: str  # "connect" or "periodic"


class ChannelClosed(Line):
    """The engine closed the history channel (after teardown): what it carried."""

    connections: int
    senders: int
    reconnections: int  # connections beyond each sender's first (a dropped one, resumed)
    events: int  # events written
    duplicates: int  # replayed events it already had (dropped)
    acks: int  # held events acknowledged over the channel
    # connections closed unheard: no hello with the run's token first, none in time, or beyond the limits
    refused: NotRequired[int]


class ChannelLimit(Line):
    """The history channel reached one of its limits (chaos/channel.py, chaos/gate.py): written once per kind, at
    the first time. Connections beyond it were refused or closed; the run's own senders reconnect and replay."""

    what: str  # "pending" (waiting for a hello), "served" (admitted), "descriptors", "threads", "error"
    detail: str  # what was done about it


class SlurmAllocated(Line):
    """The Slurm runtime holds its allocation (``salloc --no-shell --no-kill``)."""

    job_id: str
    hosts: list[str]  # every allocated host, in Slurm's order
    nodes: dict[str, str]  # node name -> host its first step runs on
    spares: list[str]  # hosts held for replacements
    channel: str  # host:port the nodes send their events to
    channel_bind: NotRequired[str]  # host:port the engine listens on, when not the same (allow_any_address)
    warning: NotRequired[str]  # e.g. the channel listens on every interface (cluster.slurm.allow_any_address)
    salloc_s: float  # from starting salloc to the job id and node list known
    command: list[str]  # the salloc line


class SlurmNodeState(Line):
    """Slurm's own state of an allocated host changed (polled with ``sinfo``): ``down*`` is Slurm noticing a lost
    host, which the recovery breakdown can set against the fault's time."""

    host: str
    state: str  # sinfo's short state: alloc, mix, idle, down*, drain ...
    previous: str
    node_failure: NotRequired[str]  # the node whose srun exited 0 on this lost host (read as killed, code -9)


class SlurmStepStarted(Line):
    """A node's job step is running according to Slurm (``squeue --steps``), seen this long after its srun."""

    node: str
    host: str
    step: str  # JOB.STEP
    after_s: float  # from starting srun to the step listed as running
    replacement: bool


class StorageSwept(Line):
    """Teardown's unmount of the storage layers on the nodes' hosts (one helper step per host, before the
    allocation goes): which mounts were still there (a server killed with its step leaves a dead one)."""

    hosts: list[str]
    ok: bool
    unmounted: NotRequired[list[str]]  # "<host>: unmounted <path>" lines
    why: NotRequired[str]


class SlurmReleased(Line):
    """Teardown's ``scancel`` of the allocation: whether Slurm took it (when not, ``chaos cleanup`` cancels the job:
    its name and comment say whose it is)."""

    job_id: str
    ok: bool
    why: NotRequired[str]  # scancel's exit code and message, or why it could not run


class NodeStarted(Line):
    node: str  # "node<i>", or the rendezvous store's name
    argv: list[str]
    replacement: NotRequired[bool]  # started by the node-restart policy after the node died (absent for the store)
    role: NotRequired[str]  # "store" for the dedicated rendezvous store


class NodeExited(Line):
    node: str
    code: int  # exit code (negative: killed by that signal, on every runtime: see signal_exit_code)
    will_replace: NotRequired[bool]  # the node-restart policy will start it again (absent when code is 0)
    # why the policy's replacement was not made: nowhere to place it (its host lost, no spare left)
    not_replaced: NotRequired[str]
    role: NotRequired[str]  # "store" for the rendezvous store


class FaultBase(Line):
    """Fields of every fault event but fault_heal_failed."""

    fault_id: int  # index of the fault in the scenario
    kind: str  # the fault kind's name (only chaos.faults gives kinds a meaning)
    target: str | None  # node name, or "network" / "storage" for faults on no single node
    disruptive: NotRequired[bool]  # interrupts training by itself; absent in old histories: treat as True


class FaultInjected(FaultBase):
    """The fault took effect: ``t`` (t_f of the metric definitions) is when the runtime says it took effect where
    it can tell (docker: the daemon saw the container die; slurm: its helper step saw the signal land), else when
    the runtime call returned."""

    mechanism: str  # how it was done (e.g. "SIGKILL to the process tree", "tc tbf ..."), for the report
    # kind-specific; ``path`` / ``paths``: checkpoint file(s) it damaged or removed (no longer valid after t)
    details: dict[str, Any]
    trigger_event: str | None  # the workload event that fired it (``on:`` triggers), else None
    max_step: int  # highest global step seen when it was injected
    # when the engine decided to inject (its trigger met); ``t - t_decided`` is the fault-effect latency: the
    # runtime's call from decision to signal delivered / rule in effect (absent in histories before it was kept)
    t_decided: NotRequired[float]
    # when the runtime call returned, where ``t`` is the effect the runtime reported instead (absent otherwise)
    t_returned: NotRequired[float]


class FaultSkipped(FaultBase):
    why: str  # e.g. the target node was not running


class FaultFailed(FaultBase):
    why: str  # the exception: the fault did not happen
    traceback: NotRequired[str]  # where the kind's inject raised it


class FaultNotReached(FaultBase):
    """Written at the end of a run for every fault whose trigger was never met: it did not happen."""

    why: str  # which trigger was not met, and how far the job got


class FaultHealed(FaultBase):
    """The fault was undone; further fields come from the kind's heal (e.g. ``restored``)."""

    at_teardown: bool  # healed because the run ended, not at the end of its duration
    # from the kind's heal: the target is back as it was (null: the kind could not tell); other fields of the heal
    # are the kind's own (only chaos.faults gives them a meaning)
    restored: NotRequired[bool | None]
    # a storage fault's heal: the operations its rule matched while installed (0: it never acted; absent: the layer
    # did not say). chaos.analysis.planned marks such a fault not injected.
    matched: NotRequired[int]


class FaultNodeReplaced(Line):
    """The node a lasting fault acts on was replaced (node_restart) while the fault lasted: whether the fault was
    put on the replacement too (the fault belongs to the node for its duration), or why not (it ended early)."""

    fault_id: int
    kind: str
    node: str
    reapplied: bool  # the replacement is under the fault as the node was
    pids: list[int]  # the replacement's processes the engine found outside the fault
    mechanism: NotRequired[str]  # how it was put on the replacement (reapplied)
    after_s: NotRequired[float | None]  # from the replacement's first process starting to the fault back on it
    why: NotRequired[str]  # why not (not reapplied): the fault no longer acts on this node


class FaultHealFailed(Line):
    fault_id: int
    why: str  # the exception: the fault may still be in effect
    traceback: NotRequired[str]  # where the kind's heal raised it


class OomKilled(Line):
    """The kernel's OOM killer killed a process of a node while a memory fault limited it (the kernel's own record:
    the cgroup's ``oom_kill`` counter went up; ``pid`` from its "Killed process" log line). What tells an OOM kill
    from a SIGKILL crash: both end a worker with exit code -9."""

    fault_id: int
    kind: str
    node: str
    pid: int | None  # null when the kernel log could not be read (the counter alone proved the kill)
    comm: NotRequired[str]  # the process name in the kernel's line
    role: NotRequired[str]  # "worker", "launcher", "allocator" (the fault's own co-located allocator), "unknown"
    rank: NotRequired[int]
    local_rank: NotRequired[int]
    killed_at: float  # host wall clock of the kernel's record (t is when the engine saw it)
    limit_bytes: int | None  # the node's memory limit then (null: none)
    evidence: str  # the counter's change and the kernel's line


class HangStarted(Line):
    """One rank stopped making progress while its process stays alive (the ``hang`` fault, chaos/faults/hang.py).

    Written by the probe in the stuck process when its main thread starts blocking (``mode: main_thread``: ``t``
    is the moment it blocked, right after its step), or by the engine when it stopped the worker process
    (``mode: process``: ``t`` is just after the SIGSTOP). Analysis measures detection from this ``t``."""

    fault_id: int
    mode: str  # "main_thread" or "process"
    node: str
    pid: NotRequired[int | list[int]]  # the stuck process (the probe's own pid; the pids stopped)
    rank: NotRequired[int]
    local_rank: NotRequired[int]
    step: NotRequired[int | None]  # the last step the stuck rank completed (main_thread)
    hold_gil: NotRequired[bool]  # the stuck main thread spins holding the GIL (main_thread with hold_gil: true)


class HangReleased(Line):
    """The stuck rank was let go: its main thread left the probe's loop, or the stopped process got SIGCONT."""

    fault_id: int
    mode: str
    node: str
    # "healed" (the fault's duration ended, or teardown), "engine gone" (the probe saw the engine's heartbeat
    # stale), "cancelled" (the order file became unreadable)
    why: str
    held_s: NotRequired[float]  # how long the rank was blocked
    pid: NotRequired[int | list[int]]
    rank: NotRequired[int]
    local_rank: NotRequired[int]


# ------------------------------------------------------------------------------------------ workload events

class ProcessStarted(WorkloadLine):
    """A worker process started (a new incarnation when rank 0 starts again: a restart)."""

    distributed: NotRequired[bool]  # the reference workload: whether it runs under torch.distributed
    # the shipped workloads of other launchers say which ("flower", "ray", "tf-multiworker"; they add their own
    # keys too); chaos.analysis.federated tells a Flower run that recorded no round by it
    launcher: NotRequired[str]


class StepCompleted(WorkloadLine):
    """One optimizer step finished on this rank."""

    step: int  # global step, 1-based, the same on every rank
    loss: NotRequired[float | None]  # null: not reported, or not finite (NaN / inf)
    samples: NotRequired[int | None]  # samples this rank consumed in the step
    duration_s: NotRequired[float | None]  # the workload's own timing of the step
    comm_s: NotRequired[float]  # seconds of the step in collectives (the reference workload)
    cpu_s: NotRequired[float]  # the probe: seconds on a CPU since the process's previous step, all threads
    cpu_wait_s: NotRequired[float]  # the probe: seconds runnable but waiting for a CPU (run queue, CPU quota)
    sample_ids: NotRequired[list[int]]  # dataset indices this rank consumed: enables the exactly-once check
    epoch: NotRequired[int]
    dataset_size: NotRequired[int]


class CheckpointSaveStarted(WorkloadLine):
    step: int
    path: str  # the final path (the file there is not complete until the matching save_finished)


class CheckpointWriteProgress(WorkloadLine):
    step: int
    path: str
    written: int  # bytes on disk so far
    total: int


class CheckpointSaveFinished(WorkloadLine):
    step: int
    path: str
    sha256: str  # digest of the bytes written: what a later load must match
    bytes: NotRequired[int]


class CheckpointLoadStarted(WorkloadLine):
    step: int
    path: str


class CheckpointLoaded(WorkloadLine):
    step: int  # the step the job resumes from
    path: str
    sha256: str  # digest of the bytes read


class CheckpointDeleted(WorkloadLine):
    step: int
    path: str


class CheckpointRejected(WorkloadLine):
    """The workload refused a checkpoint at load (e.g. its digest did not match) and looked for an older one."""

    step: int
    path: str
    why: str


class RunFinished(WorkloadLine):
    """The job reached its final state (rank 0)."""

    step: int  # the last global step
    state_sha256: NotRequired[str]  # digest of the final model + optimizer state (compared with the golden run)


class CheckpointSeen(Line):
    """A file appeared or changed in a print-only job's checkpoint directory."""

    path: str
    bytes: int
    mtime: float


class StorageOpFailed(Line):
    """The storage layer answered an operation with an injected error (a storage fault)."""

    node: str | None
    pid: int
    path: str
    op: str  # write | fsync | read | rename | open | create
    errno: str  # the errno's name, e.g. "ENOSPC"
    fault_id: int


class StorageOpStalled(Line):
    """The storage layer began blocking an operation under a stalling rule (fsync_stall) until the rule goes."""

    node: str | None
    pid: int
    path: str
    op: str  # fsync
    fault_id: int


# ------------------------------------------------------------------------------------------ agent events

class AgentLine(Line):
    """Fields of every agent event: ``t`` is when torchrun's agent logged the step (its log record's time)."""

    node: str  # CHAOS_NODE of the agent
    pid: int  # the agent's (torchrun's) pid


class AgentWorkersFailed(AgentLine):
    """The agent's monitor found its worker group failed and will restart it (the failure's detection)."""

    state: str  # FAILED or UNHEALTHY
    attempts_left: int  # restarts left before this one
    max_restarts: int


class AgentMembershipChanged(AgentLine):
    """The agent's monitor found nodes waiting to join: it restarts its healthy workers for a new round."""

    waiting: int  # nodes waiting


class AgentRendezvousStarted(AgentLine):
    """The agent begins a rendezvous round (at its start, and after stopping its workers)."""


class AgentRendezvousCompleted(AgentLine):
    """The round closed: the agent knows its group rank and the group's size."""

    restart_count: NotRequired[int]  # restarts the agent used so far
    group_rank: NotRequired[int]
    group_world_size: NotRequired[int]  # nodes in the round


class AgentWorkersStarted(AgentLine):
    """The agent spawned its worker processes (they now import and initialise)."""


class AgentWorkersSucceeded(AgentLine):
    """Every worker of the node exited 0: the agent now waits in torchrun's exit barrier for every agent of the
    round (a node that never comes, such as a replaced one, keeps it there for the whole timeout)."""

    barrier_timeout_s: NotRequired[float]  # how long the exit barrier waits (torchrun's default: 300)


class RayLine(Line):
    """Fields of every ray event: ``t`` is when the head's launcher read the controller's line from the driver's
    output (Ray's log monitor forwards an actor's lines to the driver: a fraction of a second after the
    controller wrote them, so each mark is late by that much)."""

    node: str  # CHAOS_NODE of the head
    pid: int  # the driver's pid


class RayFailureDetected(RayLine):
    """Ray Train's controller found its worker group failed and decided ("[FailurePolicy] RETRY" or "RAISE"):
    the failure's detection under Ray."""

    decision: str  # RETRY (a new worker group follows) or RAISE (the run fails)
    error_count: NotRequired[int]  # failures so far, this one included
    max_failures: NotRequired[int]  # FailureConfig.max_failures (-1: unlimited)


class RayWorkerGroupStarting(RayLine):
    """"Attempting to start training worker group": the controller asks for a placement group and new actors."""

    size: int  # workers in the group


class RayWorkerGroupStarted(RayLine):
    """"Started training worker group": the new actors run and their process group is set up (Ray Train's
    backend set-up); the training function starts next."""

    size: int


class StorageLine(Line):
    """Fields of every checkpoint event the storage layer writes (source ``storage``; docs/design.md, "The storage
    layer"): the probe's event names, with what a filesystem can and cannot know."""

    node: str | None  # the caller's CHAOS_NODE; null: a process outside the job, or the inotify watcher
    pid: int | None  # the caller's host pid; null from the inotify watcher
    path: str  # absolute, as the job sees it
    step: int | None  # a number of the path near the job's progress, else that progress (save_step); or null
    # where the step came from: "name" (a number of the path) or "progress" (the step the job had reached as the
    # save began); absent on loads and deletions, and in histories written before it existed
    step_from: NotRequired[Literal["name", "progress"]]
    id: NotRequired[str]  # held until the engine acknowledged it


class StorageSaveStarted(StorageLine):
    """A file was created or truncated for writing, and is about to be written."""


class StorageWriteProgress(StorageLine):
    written: int  # bytes written through the handle so far (no total: a filesystem cannot know it)


class StorageSaveFinished(StorageLine):
    sha256: str  # of the whole file as stored at its close (or rename)
    bytes: int
    renamed_from: NotRequired[str]  # a rename onto the path


class StorageLoaded(StorageLine):
    sha256: str  # of the file as stored when read
    bytes: int


class StorageDeleted(StorageLine):
    renamed_to: NotRequired[str]  # the source of a rename
    replaced_by: NotRequired[str]  # the target a rename replaced


class FlRound(WorkloadLine):
    """A federated server finished a round (``launcher: flower``; chaos.analysis.federated reads it). The same
    round is also a ``step_completed`` (``step`` = the round, ``loss`` = the evaluation loss): the engine's progress,
    stall and trigger logic see rounds as steps; the round's own fields are kept here, out of the step table."""

    round: int  # the global round (a restarted server that resumed goes on from the round it restored)
    results: int  # sampled clients that returned a result
    failures: int  # sampled clients that failed (a lost stream, a round timeout)
    sampled: list[str]  # the nodes (or Flower client ids, when not yet known) the server sampled for the round
    result_nodes: NotRequired[list[str]]
    failure_nodes: NotRequired[list[str]]
    errors: NotRequired[list[str]]  # the failures' exception types
    aggregated: bool  # FedAvg produced a new global model (false: nothing came back, a failed round)
    eval_loss: NotRequired[float | None]  # the global model's centralized evaluation after the round
    eval_accuracy: NotRequired[float | None]
    duration_s: NotRequired[float]  # from the round's sampling to its evaluation


# ------------------------------------------------------------------------------------------ any event

class Event(TypedDict, total=False):
    """One line of the history, of any event: every field some event declares above, each typed as the union of
    its declarations (``step`` is an int on a workload event, null from the storage layer's watcher, and Slurm's
    "JOB.STEP" on ``slurm_step_started``). This is the type a history reader gets (``chaos.history.read_history``
    and the analysis); ``total=False`` because which fields a line has depends on its ``event``: read them with
    ``.get`` or after checking ``event``. tests/test_events.py keeps it the exact union of the declarations above
    (nothing missing, nothing extra, no type wider or narrower), and tests/test_event_reads.py fails a reader in
    ``chaos`` that reads a key no event declares (a typo there reads None forever, silently)."""

    # every line
    t: float
    source: str
    event: str
    t_sender: float
    # who wrote it (workload, agent, ray and storage lines; many engine lines name the node they are about)
    node: str | None
    pid: int | str | list[int] | None
    rank: int
    local_rank: int
    world_size: int
    restart: int
    incarnation: str | int
    id: str
    # run_started, run_ended, teardown
    run_id: str
    scenario: str
    environment: dict[str, Any]
    plan: dict[str, Any]
    golden: dict[str, Any] | None
    reason: str
    why: str
    max_step: int
    traceback: str
    killed: int
    failed: list[dict[str, str]]
    # clock_sync, channel_closed, channel_limit
    sender: str
    offset_s: float
    rtt_s: float
    corrected: bool
    at: str
    connections: int
    senders: int
    reconnections: int
    events: int
    duplicates: int
    acks: int
    refused: int
    what: str
    detail: str
    # node_started, node_exited
    argv: list[str]
    replacement: bool
    role: str
    code: int
    will_replace: bool
    not_replaced: str
    # fault events, oom_killed, hang_started / hang_released
    fault_id: int
    kind: str
    target: str | None
    disruptive: bool
    mechanism: str
    details: dict[str, Any]
    trigger_event: str | None
    t_decided: float
    t_returned: float
    at_teardown: bool
    restored: bool | None
    matched: int
    reapplied: bool
    pids: list[int]
    after_s: float | None
    comm: str
    killed_at: float
    limit_bytes: int | None
    evidence: str
    mode: str
    hold_gil: bool
    held_s: float
    # the Slurm runtime's events
    job_id: str
    hosts: list[str]
    nodes: dict[str, str]
    spares: list[str]
    channel: str
    channel_bind: str
    warning: str
    salloc_s: float
    command: list[str]
    host: str
    state: str
    previous: str
    node_failure: str
    ok: bool
    unmounted: list[str]
    # workload events (steps, checkpoints, the end), the engine's checkpoint_seen, the storage layer's events
    step: int | str | None
    distributed: bool
    launcher: str
    loss: float | None
    samples: int | None
    duration_s: float | None
    comm_s: float
    cpu_s: float
    cpu_wait_s: float
    sample_ids: list[int]
    epoch: int
    dataset_size: int
    path: str
    written: int
    total: int
    sha256: str
    bytes: int
    state_sha256: str
    mtime: float
    op: str
    errno: str
    step_from: Literal["name", "progress"]
    renamed_from: str
    renamed_to: str
    replaced_by: str
    # fl_round
    round: int
    results: int
    failures: int
    sampled: list[str]
    result_nodes: list[str]
    failure_nodes: list[str]
    errors: list[str]
    aggregated: bool
    eval_loss: float | None
    eval_accuracy: float | None
    # agent and ray events
    attempts_left: int
    max_restarts: int
    waiting: int
    restart_count: int
    group_rank: int
    group_world_size: int
    barrier_timeout_s: float
    decision: str
    error_count: int
    max_failures: int
    size: int


# Each event's field declaration (for documentation, ``chaos`` tooling and tests that check the writers).
FIELDS: dict[Ev, type] = {
    Ev.RUN_STARTED: RunStarted,
    Ev.RUN_ENDED: RunEnded,
    Ev.TEARDOWN: Teardown,
    Ev.CLOCK_SYNC: ClockSync,
    Ev.CHANNEL_CLOSED: ChannelClosed,
    Ev.CHANNEL_LIMIT: ChannelLimit,
    Ev.NODE_STARTED: NodeStarted,
    Ev.NODE_EXITED: NodeExited,
    Ev.FAULT_INJECTED: FaultInjected,
    Ev.FAULT_SKIPPED: FaultSkipped,
    Ev.FAULT_FAILED: FaultFailed,
    Ev.FAULT_NOT_REACHED: FaultNotReached,
    Ev.FAULT_HEALED: FaultHealed,
    Ev.FAULT_HEAL_FAILED: FaultHealFailed,
    Ev.OOM_KILLED: OomKilled,
    Ev.FAULT_NODE_REPLACED: FaultNodeReplaced,
    Ev.SLURM_ALLOCATED: SlurmAllocated,
    Ev.SLURM_NODE_STATE: SlurmNodeState,
    Ev.SLURM_STEP_STARTED: SlurmStepStarted,
    Ev.SLURM_RELEASED: SlurmReleased,
    Ev.STORAGE_SWEPT: StorageSwept,
    Ev.HANG_STARTED: HangStarted,
    Ev.HANG_RELEASED: HangReleased,
    Ev.PROCESS_STARTED: ProcessStarted,
    Ev.STEP_COMPLETED: StepCompleted,
    Ev.CHECKPOINT_SAVE_STARTED: CheckpointSaveStarted,
    Ev.CHECKPOINT_WRITE_PROGRESS: CheckpointWriteProgress,
    Ev.CHECKPOINT_SAVE_FINISHED: CheckpointSaveFinished,
    Ev.CHECKPOINT_LOAD_STARTED: CheckpointLoadStarted,
    Ev.CHECKPOINT_LOADED: CheckpointLoaded,
    Ev.CHECKPOINT_DELETED: CheckpointDeleted,
    Ev.CHECKPOINT_REJECTED: CheckpointRejected,
    Ev.RUN_FINISHED: RunFinished,
    Ev.FL_ROUND: FlRound,
    Ev.CHECKPOINT_SEEN: CheckpointSeen,
    Ev.STORAGE_OP_FAILED: StorageOpFailed,
    Ev.STORAGE_OP_STALLED: StorageOpStalled,
    Ev.AGENT_WORKERS_FAILED: AgentWorkersFailed,
    Ev.AGENT_MEMBERSHIP_CHANGED: AgentMembershipChanged,
    Ev.AGENT_RENDEZVOUS_STARTED: AgentRendezvousStarted,
    Ev.AGENT_RENDEZVOUS_COMPLETED: AgentRendezvousCompleted,
    Ev.AGENT_WORKERS_STARTED: AgentWorkersStarted,
    Ev.AGENT_WORKERS_SUCCEEDED: AgentWorkersSucceeded,
    Ev.RAY_FAILURE_DETECTED: RayFailureDetected,
    Ev.RAY_WORKER_GROUP_STARTING: RayWorkerGroupStarting,
    Ev.RAY_WORKER_GROUP_STARTED: RayWorkerGroupStarted,
}


# The checkpoint events as the storage layer writes them (source "storage"); every other event as in FIELDS.
STORAGE_FIELDS: dict[Ev, type] = {
    Ev.CHECKPOINT_SAVE_STARTED: StorageSaveStarted,
    Ev.CHECKPOINT_WRITE_PROGRESS: StorageWriteProgress,
    Ev.CHECKPOINT_SAVE_FINISHED: StorageSaveFinished,
    Ev.CHECKPOINT_LOADED: StorageLoaded,
    Ev.CHECKPOINT_DELETED: StorageDeleted,
}


def required_fields(event: Ev) -> frozenset[str]:
    """Fields a line of this event always has (inherited common fields included)."""
    return FIELDS[event].__required_keys__  # type: ignore[attr-defined, no-any-return]


# The highest signal number (Linux's SIGRTMAX): a status 128 + N above it is an exit status, not a signal.
_SIGNAL_MAX = 64


def signal_exit_code(code: int | None) -> int | None:
    """A node's exit code in the history's one convention: ``-N`` for a process killed by signal N.

    Python's Popen (the local runtime) says -9 for a SIGKILLed node; ``srun`` (Slurm) and Docker report the
    shell's 128 + N (137). Both mean the same death, so the history, the end's why and result.json must say it
    the same way on every runtime: a status 129..128+64 is a signal, said as ``-N``; any other code is the
    process's own exit status (a script that exits 137 on purpose is indistinguishable, as in the shell)."""
    if code is not None and 128 < code <= 128 + _SIGNAL_MAX:
        return 128 - code
    return code


# The line a runtime writes into a node's log as it starts (or restarts) the node: the engine's progress scraping
# (chaos.engine.progress) takes it as the end of that node's previous round.
NODE_BANNER = "===== torch-chaos: starting "
