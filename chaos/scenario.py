"""The scenario file format: one pydantic model per section, strict (unknown fields are errors).

Defaults live here and nowhere else, so ``chaos run --dry-run`` and ``chaos schema`` show exactly what a run
will do. The elastic settings default to the ones measured to recover fast; ``elastic.preset:
torchrun-defaults`` drops every override so torchrun's own defaults can be measured side by side.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """Accept ``10``, ``2.5``, ``"10s"``, ``"500ms"``, ``"2m"``; anything else is left for pydantic to reject."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT_S[m.group(2)]
        raise ValueError(f"expected a duration such as 10s, 500ms or 2m, got {value!r}")
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
# YAML reads `[python, train.py, --epochs, 10]` with an int in it; a command line is strings.
Arg = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                     else v)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rendezvous(Strict):
    backend: Literal["c10d"] = "c10d"
    store: Literal["node0", "dedicated"] = Field(
        "node0", description="node0: the store lives in node 0's agent (torchrun's layout, a single point of "
        "failure); dedicated: a separate store process that faults leave alone unless they target it")
    join_timeout_s: Seconds | None = None
    last_call_timeout_s: Seconds | None = None
    close_timeout_s: Seconds | None = None
    keep_alive_interval_s: Seconds | None = None
    keep_alive_max_attempt: int | None = Field(None, ge=1)
    read_timeout_s: Seconds | None = None


class NodeRestart(Strict):
    """The orchestrator's part: whether a node whose process tree died is replaced, and after how long."""

    policy: Literal["never", "on-failure"] = "never"
    delay_s: Seconds = 1.0
    max_restarts: int = Field(10, ge=0, description="replacements per node before the orchestrator gives up")


class DockerOptions(Strict):
    image: str | None = Field(None, description="image to run nodes in (default: the one `chaos image build` makes "
                              "for this torch version)")


RuntimeName = Literal["local", "netns", "docker"]


class Cluster(Strict):
    runtime: RuntimeName = Field(
        "local", description="local: process trees on this machine; netns: local processes, each node in its own "
        "network namespace (root); docker: one container per node on an internal network")
    docker: DockerOptions = Field(default_factory=DockerOptions)
    mode: Literal["elastic", "centralized"] = "elastic"
    nodes: int = Field(3, ge=1, le=64)
    min_nodes: int | None = Field(None, ge=1, description="defaults to nodes")
    procs_per_node: int = Field(1, ge=1, le=64)
    preset: Literal["tuned", "torchrun-defaults"] = Field(
        "tuned", description="tuned: the settings measured to recover fast; torchrun-defaults: torchrun's own")
    rendezvous: Rendezvous = Field(default_factory=Rendezvous)
    max_restarts: int | None = Field(None, ge=0, description="torchrun --max-restarts (per agent)")
    process_group_timeout_s: Seconds | None = None
    share_rendezvous_store: bool | None = Field(
        None, description="false sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")
    node_restart: NodeRestart = Field(default_factory=NodeRestart)
    threads_per_proc: int = Field(1, ge=1, description="OMP_NUM_THREADS for each worker")

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"min_nodes ({self.min_nodes}) must not exceed nodes ({self.nodes})")
        if self.mode == "centralized" and self.nodes != 1:
            raise ValueError("a centralized job runs on exactly 1 node (set nodes: 1)")
        return self


class ShippedWorkload(Strict):
    name: Literal["ddp-mlp"] = Field(description="a reference workload shipped in workloads/")
    args: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="command-line arguments, e.g. {steps: 800, checkpoint_every: 50}")


class CommandWorkload(Strict):
    command: list[Arg] = Field(min_length=1, description="the training command; torchrun wraps it in elastic mode")
    progress_regex: str = Field(description="regex with a named group 'step' (and optionally 'loss')")
    checkpoint_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> CommandWorkload:
        try:
            pattern = re.compile(self.progress_regex)
        except re.error as exc:
            raise ValueError(f"progress_regex is not a valid regular expression: {exc}") from None
        if "step" not in pattern.groupindex:
            raise ValueError("progress_regex needs a named group 'step', e.g. 'step (?P<step>\\d+)'")
        return self


def _workload_kind(value: Any) -> str:
    """Pick the workload form from its keys, so errors speak of one form instead of both."""
    if isinstance(value, dict):
        return "CommandWorkload" if "command" in value else "ShippedWorkload"
    return "CommandWorkload" if isinstance(value, CommandWorkload) else "ShippedWorkload"


Workload = Annotated[
    Annotated[ShippedWorkload, Tag("ShippedWorkload")] | Annotated[CommandWorkload, Tag("CommandWorkload")],
    Discriminator(_workload_kind),
]


class EventTrigger(Strict):
    event: Literal["checkpoint_save_started", "checkpoint_write_progress", "checkpoint_save_finished",
                   "checkpoint_loaded", "process_started"]
    occurrence: int = Field(1, ge=1, description="fire on the N-th such event")


FaultKind = Literal["crash", "kill_worker", "freeze", "corrupt_checkpoint", "delay", "loss", "bandwidth",
                    "partition", "isolate"]
NETWORK_FAULTS = ("delay", "loss", "bandwidth", "partition", "isolate")
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
PartitionMember = int | Literal["store"]


class Fault(Strict):
    kind: FaultKind
    target: int | Literal["rendezvous_host", "random", "event_node"] | None = Field(
        None, description="required for node faults: a node index, rendezvous_host (node 0 or the dedicated "
        "store), random (with seed), or event_node (the node that emitted the triggering event)")
    seed: int | None = Field(None, description="seed for target: random")
    at: Seconds | None = Field(None, description="seconds after the first training step")
    at_step: int | None = Field(None, ge=1, description="right after the job first completes this global step "
                                "(instrumented jobs are held there until the fault has landed)")
    on: EventTrigger | None = Field(None, description="on a workload event")
    duration: Seconds | None = Field(None, description="how long the fault lasts (freeze; network faults, which "
                                     "otherwise last until the run ends)")
    mode: Literal["truncate", "flip", "delete"] | None = Field(
        None, description="corrupt_checkpoint only: how the newest checkpoint is damaged")
    delay: Seconds | None = Field(None, description="delay only: added to every packet the node sends, e.g. 100ms")
    jitter: Seconds | None = Field(None, description="delay only: uniform +- spread, e.g. 10ms")
    loss_percent: float | None = Field(None, gt=0, le=100, description="loss only: share of sent packets dropped")
    rate: str | None = Field(None, description="bandwidth only: egress cap in tc units, e.g. 10mbit, 500kbit")
    groups: list[list[PartitionMember]] | None = Field(
        None, description="partition only: two groups of node indices (or 'store') that stop reaching each other, "
        "e.g. [[0], [1, 2]] or [[1], [store]]")
    one_way: bool = Field(False, description="partition only: cut traffic from the first group to the second only")

    @model_validator(mode="after")
    def _check(self) -> Fault:
        triggers = [n for n in ("at", "at_step", "on") if getattr(self, n) is not None]
        if len(triggers) != 1:
            raise ValueError(f"give exactly one trigger (at, at_step or on), got {triggers or 'none'}")
        if self.kind == "freeze" and self.duration is None:
            raise ValueError("freeze needs a duration, e.g. duration: 5s")
        if self.kind not in ("freeze", *NETWORK_FAULTS) and self.duration is not None:
            raise ValueError(f"{self.kind} takes no duration")
        self._check_network_fields()
        if self.kind == "corrupt_checkpoint":
            if self.mode is None:
                self.mode = "flip"
        elif self.mode is not None:
            raise ValueError("mode applies to corrupt_checkpoint only")
        if self.target is None and self.kind not in ("corrupt_checkpoint", "partition"):
            raise ValueError(f"{self.kind} needs a target: a node index, rendezvous_host, random or event_node")
        if self.target is not None and self.kind == "corrupt_checkpoint":
            raise ValueError("corrupt_checkpoint acts on the checkpoint storage and takes no target")
        if self.target is not None and self.kind == "partition":
            raise ValueError("partition takes groups, not a target (isolate cuts one node off everything)")
        if self.target == "event_node" and self.on is None:
            raise ValueError("target: event_node needs an 'on' trigger")
        if self.seed is not None and self.target != "random":
            raise ValueError("seed applies to target: random only")
        return self


    def _check_network_fields(self) -> None:
        needs = {"delay": "delay", "loss": "loss_percent", "bandwidth": "rate", "partition": "groups"}
        owners = {"delay": "delay", "jitter": "delay", "loss_percent": "loss", "rate": "bandwidth",
                  "groups": "partition"}
        for name, owner in owners.items():
            if getattr(self, name) is not None and self.kind != owner:
                raise ValueError(f"{name} applies to kind: {owner} only")
        if self.one_way and self.kind != "partition":
            raise ValueError("one_way applies to kind: partition only")
        if self.kind in needs and getattr(self, needs[self.kind]) is None:
            example = {"delay": "delay: 100ms", "loss": "loss_percent: 10", "bandwidth": "rate: 10mbit",
                       "partition": "groups: [[0], [1, 2]]"}[self.kind]
            raise ValueError(f"{self.kind} needs {needs[self.kind]}, e.g. {example}")
        if self.rate is not None and not _RATE.match(self.rate):
            raise ValueError(f"rate: expected a tc rate such as 10mbit, 500kbit or 1gbit, got {self.rate!r}")
        if self.groups is not None:
            if len(self.groups) != 2 or not all(self.groups):
                raise ValueError("groups: expected two non-empty groups, e.g. [[0], [1, 2]]")
            overlap = set(map(str, self.groups[0])) & set(map(str, self.groups[1]))
            if overlap:
                raise ValueError(f"groups: {sorted(overlap)} cannot be on both sides of a partition")


class Bound(Strict):
    max: float | None = None
    min: float | None = None

    @model_validator(mode="after")
    def _check(self) -> Bound:
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        return self


class CheckpointExpect(Strict):
    """Checkpoint verdicts a scenario requires; unset ones only fail the run when the checker says they failed."""

    digests_ok: bool | None = None
    resumed_from_newest_valid: bool | None = None
    matches_golden: Literal["bitwise", "within_tolerance"] | None = Field(
        None, description="bitwise: identical final state; within_tolerance: bitwise or within checks.loss_rtol")
    exactly_once: bool | None = None


class Checks(Strict):
    golden: bool = Field(True, description="run (or reuse) a fault-free golden run to compare the final model with")
    loss_rtol: float = Field(1e-3, ge=0, description="relative loss tolerance when the world size changed")
    mtbf_s: Seconds | None = Field(None, gt=0, description="mean time between failures, for checkpoint-interval "
                                   "advice in reports (e.g. 6h)")


class Expect(Strict):
    completes: bool | None = Field(None, description="the job must (true) or must not (false) finish all steps")
    recovery_s: Bound | None = None
    catch_up_s: Bound | None = None
    lost_steps: Bound | None = None
    slowdown: Bound | None = Field(None, description="median step time while a healed fault was active, over the "
                                   "fault-free median (network impairments)")
    goodput: Bound | None = None
    restarts: Bound | None = None
    checkpoint: CheckpointExpect | None = Field(None, description="checkpoint-correctness verdicts to require")


class Explore(Strict):
    """Bounds for ``chaos explore``: which fault plans hypothesis may generate (and shrink) for this scenario."""

    kinds: list[Literal["crash", "kill_worker", "freeze", "corrupt_checkpoint"]] = Field(
        default_factory=lambda: ["crash"], min_length=1, description="process and storage faults (network faults "
        "need parameters of their own and are not generated yet)")
    targets: list[int | Literal["rendezvous_host", "event_node"]] = Field(
        default_factory=lambda: [0], min_length=1, description="event_node applies to event-triggered faults")
    max_faults: int = Field(2, ge=1, le=8)
    step_window: tuple[int, int] = Field((1, 100), description="at_step triggers are drawn from this range")
    events: list[Literal["checkpoint_save_started", "checkpoint_write_progress", "checkpoint_save_finished"]] = Field(
        default_factory=list, description="workload events faults may be triggered on")
    occurrences: tuple[int, int] = Field((1, 5), description="which occurrence of the event")
    durations: tuple[Seconds, Seconds] = Field((1.0, 5.0), description="freeze durations (seconds)")

    @model_validator(mode="after")
    def _check(self) -> Explore:
        for name in ("step_window", "occurrences", "durations"):
            low, high = getattr(self, name)
            if low > high or low < (0 if name == "durations" else 1):
                raise ValueError(f"{name}: expected [low, high] with 1 <= low <= high, got [{low}, {high}]")
        if self.targets == ["event_node"] and not self.events:
            raise ValueError("targets: event_node alone needs events to trigger on")
        return self


class Limits(Strict):
    deadline_s: Seconds = Field(300.0, gt=0, description="the run is stopped after this long")
    stall_timeout_s: Seconds = Field(90.0, gt=0, description="no step for this long = hung")
    restart_loop_restarts: int = Field(
        4, ge=1, description="this many worker restarts in a row without a new highest step, none of them "
        "following an injected fault, = restart loop")
    startup_timeout_s: Seconds = Field(120.0, gt=0, description="no first step within this long = hung")


class Scenario(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    cluster: Cluster = Field(default_factory=Cluster)
    workload: Workload
    faults: list[Fault] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)
    checks: Checks = Field(default_factory=Checks)
    explore: Explore | None = Field(None, description="bounds for generated fault plans (chaos explore)")
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        for i, fault in enumerate(self.faults):
            if isinstance(fault.target, int) and fault.target >= self.cluster.nodes:
                raise ValueError(f"faults[{i}].target: node {fault.target} does not exist "
                                 f"(the cluster has nodes 0..{self.cluster.nodes - 1})")
            if fault.target == "rendezvous_host" and self.cluster.mode == "centralized":
                raise ValueError(f"faults[{i}].target: a centralized job has no rendezvous host")
            if fault.kind in NETWORK_FAULTS and self.cluster.runtime == "local":
                raise ValueError(f"faults[{i}].kind: {fault.kind} needs a network stack per node; set "
                                 "cluster.runtime: netns or docker (the local runtime shares one loopback)")
            for member in [m for group in fault.groups or [] for m in group]:
                if isinstance(member, int) and member >= self.cluster.nodes:
                    raise ValueError(f"faults[{i}].groups: node {member} does not exist "
                                     f"(the cluster has nodes 0..{self.cluster.nodes - 1})")
                if member == "store" and self.cluster.mode == "centralized":
                    raise ValueError(f"faults[{i}].groups: a centralized job has no rendezvous store")
            if fault.groups and self.cluster.rendezvous.store == "node0" and any(
                    "store" in side and 0 in other for side, other in (fault.groups, fault.groups[::-1])):
                raise ValueError(f"faults[{i}].groups: node 0 hosts the rendezvous store (rendezvous.store: node0), "
                                 "so it cannot be cut from it; use rendezvous.store: dedicated")
        return self
