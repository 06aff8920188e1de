"""The scenario file format: one pydantic model per section, strict (unknown fields are errors).

Defaults live here and nowhere else, so ``chaos run --dry-run`` and ``chaos schema`` show exactly what a run
will do. The elastic settings default to the ones measured to recover fast; ``elastic.preset:
torchrun-defaults`` drops every override so torchrun's own defaults can be measured side by side.

The parts that plug-ins add are generated from the registry on first use (:func:`model`), not at import: ``faults`` is a
discriminated union (on ``kind``) of every fault kind's options model, ``cluster.runtime`` and
``rendezvous.backend`` accept the registered names, and each runtime with options gets ``cluster.<name>``.
See docs/design.md, "Extension points".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationInfo,
    create_model,
    model_validator,
)

from chaos.capabilities import CAPABILITIES, STORAGE_LAYER
from chaos.events import ExploreTriggerEvent
from chaos.faults.base import LAYOUTS, launch_layout, layout_problem
from chaos.paths import check_allowed, check_path
from chaos.plan import rendezvous_server_names
from chaos.registry import (
    LAUNCHER_OF_MODE,
    fault_plugins,
    launcher_of,
    launcher_plugins,
    raised_by,
    rendezvous_plugins,
    runtime_plugins,
)
from chaos.spec import (
    SERVER_PREFIXES,
    EventTrigger,
    FaultSpec,
    PositiveSeconds,
    Seconds,
    ServerName,
    Strict,
    parse_duration,
    stored,
    time_fields,
)
from chaos.workload import RESERVED_ENV, Arg, CommandWorkload, EnvValue, ShippedWorkload, Workload
from chaos.workload_args import LAYER_HELD_EVENTS, SHIPPED, layer_only_event
from chaos.workload_args import problems as arg_problems

# The workload section and rendezvous_server_names live in chaos.workload and chaos.plan (plug-ins import them);
# named here too, where the scenario's readers look for them.
__all__ = ["RESERVED_ENV", "Arg", "CommandWorkload", "EnvValue", "EventTrigger", "Fault", "FaultSpec", "Scenario",
           "Seconds", "ShippedWorkload", "Workload", "make_fault", "parse_duration", "rendezvous_server_names"]

# Made from the plug-ins on first use (model(), at the end of this module); declared here for the functions above it.
Scenario: Any
Fault: Any


def _names(plugins: dict[str, Any]) -> Any:
    """A Literal of the registered names, so a wrong one is answered with the list of right ones."""
    return Literal[tuple(plugins)]  # type: ignore[valid-type]


class NodeRestart(Strict):
    """The orchestrator's part: whether a node whose process tree died is replaced, and after how long."""

    policy: Literal["never", "on-failure"] = "never"
    delay_s: Seconds = 1.0
    max_restarts: int = Field(10, ge=0, description="replacements per node before the orchestrator gives up")


class Resources(Strict):
    """Pinned compute per node, so adding a node adds a machine's worth of compute (docs/design.md, "Fair
    comparisons"): every node gets ``cpus`` cores of its own, disjoint from every other node's."""

    cpus: int | None = Field(
        None, ge=1, le=1024, description="cores pinned to each node, disjoint across nodes (CPU affinity of the "
        "node's process tree on local and netns, cpuset on docker); unset: every node may run on every core of the "
        "host. nodes × cpus must fit the host's cores unless allow_oversubscribe")
    allow_oversubscribe: bool = Field(
        False, description="let nodes × cpus exceed the host's cores: cores are then dealt round-robin, nodes share "
        "some, and the run (and any comparison of it) is flagged oversubscribed")


def _fault_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return f"Fault[{kind}]" if isinstance(kind, str) else None


def _conditional(runtime: Any) -> frozenset[str]:
    """Capabilities the runtime has on some machines only: valid here, checked on the machine that runs it
    (chaos.doctor.unmet, Runtime.capability_check)."""
    return frozenset(getattr(runtime, "conditional_capabilities", frozenset()))


def _needs(need: str, runtime: str, able: list[str]) -> str:
    """The refusal of a runtime without a capability, as a sentence: what the kind needs, that this runtime lacks
    it, and which runtimes have it."""
    text = CAPABILITIES.get(need)
    what = f"a runtime that {text}" if text else f"the capability {need!r}"
    return (f"needs {what}; the {runtime} runtime does not" + (f": set cluster.runtime: {' or '.join(able)}"
                                                              if able else ", and no installed runtime does"))


def _able(need: str) -> list[str]:
    """The runtimes that give ``need``, those that give it on some machines only said so."""
    return [n for n, r in runtime_plugins().items() if need in r.capabilities] + [
        f"{n} (where it has it)" for n, r in runtime_plugins().items() if need in _conditional(r)]


def _store_target_problems(kind: str, cluster: Any, plugins: dict[str, Any]) -> list[str]:
    """Why ``target: store`` cannot be taken here: no dedicated store process, or a kind that cannot act on one."""
    if not launcher_of(cluster).rendezvous:
        return [f"a {cluster.mode} job has no rendezvous store"]
    problems = []
    if cluster.rendezvous.store != "dedicated":
        problems.append("store means the dedicated rendezvous store process, and this cluster has none "
                        "(rendezvous.store: node0 keeps it inside node 0's torchrun agent); set rendezvous: "
                        "{store: dedicated}, or target rendezvous_host to crash node 0 with its store")
    if not getattr(plugins[kind], "acts_on_store", False):
        able = sorted(k for k, p in plugins.items() if getattr(p, "acts_on_store", False))
        problems.append(f"{kind} cannot act on the rendezvous store (it has no workers, checkpoints or memory "
                        f"cgroup of its own); kinds that can: {', '.join(able)} (and partition with a 'store' group)")
    return problems


def _server_target_problems(fault: Any, cluster: Any, plugins: dict[str, Any]) -> list[str]:
    """Why ``target: etcd1`` (a rendezvous backend's server) cannot be taken here."""
    names = rendezvous_server_names(cluster)
    problems = []
    if not launcher_of(cluster).rendezvous or fault.target not in names:
        problems.append(f"{fault.target} is not a server of this cluster's rendezvous (backend: "
                        f"{cluster.rendezvous.backend}" + (f", servers {', '.join(names)})" if names else
                                                            ", which runs none)"))
    if not getattr(plugins[fault.kind], "acts_on_store", False):
        able = sorted(k for k, p in plugins.items() if getattr(p, "acts_on_store", False))
        problems.append(f"{fault.kind} cannot act on a rendezvous server; kinds that can: {', '.join(able)}")
    return problems


def _problems_from(plugin: Any, hook: str, *args: Any) -> list[str]:
    """A plug-in's own problems with a scenario (``check``, ``scenario_problems``, ``check_explore``); a hook that
    raises is one problem naming the plug-in, its package and the exception, never a traceback of ``validate``."""
    try:
        return list(getattr(plugin, hook)(*args))
    except Exception as exc:  # a third-party bug; pydantic would let a non-ValueError escape as a traceback
        return [f"kind: {raised_by(plugin, hook, exc)}" if hook == "check" else raised_by(plugin, hook, exc)]


@dataclass
class _Target:
    kind: str
    target: Any


def explore_targets(plugin: Any, bounds: Any, nodes: int, trigger: str = "on") -> list[Any]:
    """The targets of ``bounds.targets`` a generated fault of this kind may take: nodes that exist, event_node
    for event-triggered faults only, the store and rendezvous servers for the kinds that can act on them."""
    out: list[Any] = []
    for t in bounds.targets:
        if isinstance(t, int):
            ok = t < nodes
        elif t == "event_node":
            ok = trigger == "on" and bool(bounds.events)
        elif t == "store" or t.startswith(SERVER_PREFIXES):
            ok = bool(getattr(plugin, "acts_on_store", False))
        else:
            ok = True
        if ok:
            out.append(t)
    return out


def make_fault(**fields: Any) -> Any:
    """A validated fault spec of whichever kind ``fields["kind"]`` names (``Fault`` is a union, not a class)."""
    return TypeAdapter(_part("Fault")).validate_python(fields)


class Bound(Strict):
    # Finite: a NaN bound can never hold and an infinite one always does, and result.json would carry them as the
    # non-JSON tokens NaN/Infinity that strict parsers (a CI's) refuse.
    max: float | None = Field(None, allow_inf_nan=False)
    min: float | None = Field(None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Bound:
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        if self.max is not None and self.min is not None and self.min > self.max and not stored(info):
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no run can meet it")
        return self


class CheckpointExpect(Strict):
    """Checkpoint verdicts a scenario requires; unset ones only fail the run when the checker says they failed."""

    digests_ok: bool | None = None
    resumed_from_newest_valid: bool | None = None
    matches_golden: Literal["bitwise", "within_noise", "within_tolerance"] | None = Field(
        None, description="bitwise: identical final state; within_noise: bitwise, equal as printed (a print-only "
        "job's rounded losses) or within the measured noise of a clean resume; within_tolerance: any of those or "
        "within checks.loss_rtol")
    exactly_once: bool | None = None
    one_writer_per_file: bool | None = None
    next_resume_intact: bool | None = Field(
        None, description="the newest checkpoint on disk at the end (what a restart would load next) is whole")
    replay_consistent: bool | None = Field(
        None, description="steps a resume trained again reproduce their first execution's losses within the resume "
        "noise (no golden run needed)")


class Checks(Strict):
    golden: bool | Literal["beside", "cluster"] = Field(
        True, description="run (or reuse) a fault-free golden run to compare the final model with, and where: beside: "
        "local processes beside the engine; cluster: a run of the same job on the scenario's runtime (on Slurm an "
        "allocation of its own, before the faulted run); true: beside where the runtime allows it (local, docker, "
        "netns), else on the cluster (slurm); false: none")
    loss_rtol: float | None = Field(
        None, ge=0, description="pin the relative loss tolerance of the golden comparison (no control run). Unset: "
        "bitwise, else within the noise a control run measures for a clean resume; 1e-3 when the world size "
        "changed")
    mtbf_s: PositiveSeconds | None = Field(None, description="mean time between failures, for checkpoint-interval "
                                   "advice in reports (e.g. 6h)")


class Storage(Strict):
    """How torch-chaos watches the checkpoint directory (docs/design.md, "The storage layer")."""

    layer: Literal["auto", "fuse", "inotify", "off"] = Field(
        "auto", description="auto: the FUSE passthrough where this machine has FUSE, else the inotify watcher; fuse: "
        "require FUSE; inotify: save and delete events at coarser timing (no loads, holds or storage faults); off")
    watch: bool = Field(
        False, description="watch a shipped workload's checkpoint directory through the layer although no fault "
        "needs it (its probe already reports its saves; the layer adds write progress). Set by torch-chaos for the "
        "fault-free run of a scenario whose trigger only the layer emits, so both runs count the same events")
    passthrough: bool = Field(
        False, description="FUSE layer only: the kernel reads and writes the checkpoint files' bytes itself (FUSE "
        "passthrough), the server sees opens, fsyncs, closes and renames but no read or write: near the disk's "
        "throughput. Its events: checkpoint_save_started at the open (never held), no checkpoint_write_progress, "
        "checkpoint_loaded at the close. Refused with a storage fault that acts on reads or writes (disk_full, "
        "io_error/slow_io with write or read ops) or a trigger the layer holds; needs root, Linux >= 6.9 and "
        "libfuse >= 3.17 (`python -m chaos.storage build-libfuse`), else the run stops before it starts")


# Storage effects (chaos.storage.rules.EFFECTS) that never act on a read or write: fine with passthrough.
_OFF_DATA_PATH_EFFECTS = frozenset({"stall_fsync", "power_loss"})
_DATA_OPS = frozenset({"write", "read"})


def data_path_fault(plugin: Any, fault: Any | None) -> str | None:
    """Why a fault (or, with ``fault`` None, any fault explore may draw of the kind) acts on reads or writes, which
    storage.passthrough hands to the kernel; None when it does not."""
    if STORAGE_LAYER not in plugin.needs:
        return None
    effect = getattr(plugin, "layer_effect", "") or "an effect of its own"
    if effect in _OFF_DATA_PATH_EFFECTS:
        return None
    if effect in ("error", "slow"):
        ops = getattr(fault, "ops", None) if fault is not None else None
        if ops is not None and not set(ops) & _DATA_OPS:
            return None
        return f"its {effect} rule matches " + ("write/read" if ops is None else "/".join(sorted(set(ops) & _DATA_OPS)))
    return f"its {effect} rule counts or fails writes"


class FederatedExpect(Strict):
    """Round-level bounds for a federated run (``launcher: flower``; chaos.analysis.federated measures them)."""

    rounds_completed: Bound | None = Field(None, description="distinct rounds the server aggregated")
    rounds_failed: Bound | None = Field(None, description="rounds in which no sampled client returned a result")
    client_failures: Bound | None = Field(None, description="client failures summed over every round")
    rounds_redone: Bound | None = Field(None, description="rounds executed again after having completed (a "
                                        "restarted server that did not resume)")
    rounds_lost: Bound | None = Field(None, description="rounds a server crash cost (not run, or run again)")
    to_next_round_s: Bound | None = Field(None, description="from each fault to the next completed round (the "
                                          "worst fault's)")
    final_accuracy: Bound | None = Field(None, description="the global model's final evaluation accuracy")
    accuracy_drop: Bound | None = Field(None, description="the fault-free (golden) run's final accuracy minus "
                                        "this run's")
    loss_increase: Bound | None = Field(None, description="this run's final evaluation loss minus the golden run's")


class Expect(Strict):
    completes: bool | None = Field(None, description="the job must (true) or must not (false) finish all steps")
    recovery_s: Bound | None = None
    catch_up_s: Bound | None = None
    lost_steps: Bound | None = None
    slowdown: Bound | None = Field(None, description="median step time while a healed fault was active, over the "
                                   "fault-free median (network impairments)")
    goodput: Bound | None = None
    restarts: Bound | None = None
    faults_injected: Bound | None = Field(None, description="how many planned faults must really have happened "
                                          "(for plans whose faults are optional, e.g. those chaos explore makes)")
    checkpoint: CheckpointExpect | None = Field(None, description="checkpoint-correctness verdicts to require")
    federated: FederatedExpect | None = Field(None, description="round-level bounds of a federated run (launcher: "
                                              "flower), e.g. rounds_failed: {max: 1}")


MAX_FAULTS = 64  # a plan of more faults than this is a mistake (and would take longer than any deadline to heal)

def _can_generate(plugin: Any) -> bool:
    """Whether explore may draw a kind; a plug-in whose can_generate raises is left out of explore, not allowed to
    break the import of the scenario model (every command)."""
    try:
        return bool(plugin.can_generate())
    except Exception:
        return False


class Limits(Strict):
    deadline_s: PositiveSeconds = Field(300.0, description="the run is stopped after this long")
    stall_timeout_s: PositiveSeconds = Field(90.0, description="no step for this long = hung")
    restart_loop_restarts: int = Field(
        4, ge=1, description="this many worker restarts in a row without a new highest step, none of them "
        "following an injected fault, = restart loop")
    startup_timeout_s: PositiveSeconds = Field(120.0, description="no first step within this long = hung")


# ------------------------------------------------------------------ the parts made from the plug-ins
# Built on first use (model()), not at import: the plug-ins import the modules this one imports, and a command that
# reads no scenario (--help, a report) loads none of them.
_BUILT = ("Rendezvous", "ClusterBase", "Cluster", "_KINDS", "Fault", "_EXPLORABLE", "ExploreBase", "Explore",
          "Scenario")


def _build() -> dict[str, Any]:
    class Rendezvous(Strict):
        __qualname__ = "Rendezvous"
        backend: _names(rendezvous_plugins()) = Field(  # type: ignore[valid-type]
            "c10d", description="; ".join(f"{n}: {p.summary}" for n, p in rendezvous_plugins().items()))
        store: Literal["node0", "dedicated"] = Field(
            "node0", description="node0: the store lives in node 0's agent (torchrun's layout, a single point of "
            "failure); dedicated: a separate store process that faults leave alone unless they target it")
        members: Literal[1, 3] | None = Field(
            None, description="how many servers a backend with servers of its own runs (etcd, etcd-v2: 1 or 3 etcd "
            "members etcd0.., default 1); not for c10d")
        join_timeout_s: Seconds | None = None
        last_call_timeout_s: Seconds | None = None
        close_timeout_s: Seconds | None = None
        keep_alive_interval_s: Seconds | None = None
        keep_alive_max_attempt: int | None = Field(None, ge=1)
        read_timeout_s: Seconds | None = None
    class ClusterBase(Strict):
        __qualname__ = "ClusterBase"
        runtime: _names(runtime_plugins()) = Field(  # type: ignore[valid-type]
            "local", description="; ".join(f"{n}: {p.summary}" for n, p in runtime_plugins().items()))
        launcher: _names(launcher_plugins()) | None = Field(  # type: ignore[valid-type]
            None, description="how the job's processes start (default: the one `mode` names, else torchrun); "
            + "; ".join(f"{n}: {p.summary}" for n, p in launcher_plugins().items()))
        mode: _names({m: m for m in (*LAUNCHER_OF_MODE, *(p.mode for p in launcher_plugins().values()))}  # type: ignore[valid-type]
                     ) | None = Field(
            None, description="the launcher's family, as written before launchers were plug-ins: elastic names "
            "torchrun, centralized names process (default: elastic, or the launcher's own)")
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
        resources: Resources = Field(default_factory=Resources, description="pinned resources per node")

        @model_validator(mode="after")
        def _check(self) -> ClusterBase:
            if self.min_nodes is not None and self.min_nodes > self.nodes:
                raise ValueError(f"min_nodes ({self.min_nodes}) must not exceed nodes ({self.nodes})")
            plugins = launcher_plugins()
            if self.launcher is None:
                named = LAUNCHER_OF_MODE.get(self.mode or "elastic")
                if named is None:
                    able = [n for n, p in plugins.items() if p.mode == self.mode]
                    raise ValueError(f"mode: {self.mode} is the mode of the {' or '.join(able)} launcher; write "
                                     f"launcher: {able[0] if able else self.mode} instead")
                self.launcher = named
            own = plugins[self.launcher].mode
            if self.mode is None:
                self.mode = own
            elif self.mode != own:
                raise ValueError(f"mode: {self.mode} does not match launcher: {self.launcher}, whose mode is {own}; "
                                 "drop mode (the launcher names it)")
            if plugins[self.launcher].single_node and self.nodes != 1:
                raise ValueError(f"a {self.mode} job runs on exactly 1 node (set nodes: 1)")
            return self


    # Each runtime with options of its own gets `cluster.<name>: {...}` (e.g. cluster.docker.image).
    Cluster = create_model(  # type: ignore[call-overload]
        "Cluster", __base__=ClusterBase,
        **{name: (p.options, Field(default_factory=p.options, description=f"options of the {name} runtime"))
           for name, p in runtime_plugins().items() if p.options is not None},
        # and each launcher with options of its own `cluster.<name>: {...}` (e.g. cluster.ray), a runtime's name first
        **{name: (p.options, Field(default_factory=p.options, description=f"options of the {name} launcher"))
           for name, p in launcher_plugins().items() if p.options is not None and name not in runtime_plugins()})
    # One options model per registered fault kind, chosen by `kind`; the tag is capitalised so error paths drop it
    # (chaos/loading.py). An unknown or missing kind is answered with the list of installed ones.
    _KINDS = ", ".join(repr(k) for k in fault_plugins())
    Fault = Annotated[
        Union[tuple(Annotated[p.options, Tag(f"Fault[{name}]")] for name, p in fault_plugins().items())],  # noqa: UP007
        Discriminator(_fault_tag, custom_error_type="fault_kind",
                      custom_error_message=f"kind: expected one of {_KINDS} (`chaos plugins` describes each)"),
    ]
    _EXPLORABLE = {name: p for name, p in fault_plugins().items() if _can_generate(p)}


    class ExploreBase(Strict):
        __qualname__ = "ExploreBase"
        """Bounds for ``chaos explore``: which fault plans hypothesis may generate (and shrink) for this scenario."""

        kinds: list[_names(_EXPLORABLE)] = Field(  # type: ignore[valid-type]
            default_factory=lambda: [k for k, p in _EXPLORABLE.items() if p.explore_default], min_length=1,
            description="fault kinds whose plug-in can generate "
            f"plans: {', '.join(_EXPLORABLE)} (the others are not generated yet)")
        targets: list[int | Literal["rendezvous_host", "event_node", "store"] | ServerName] = Field(
            default_factory=lambda: [0], min_length=1, description="event_node applies to event-triggered faults; "
            "store (the dedicated rendezvous store) and etcdN (a rendezvous server) to the kinds that can act on them")
        max_faults: int = Field(2, ge=1, le=8)
        step_window: tuple[int, int] = Field((1, 100), description="at_step triggers are drawn from this range")
        events: list[ExploreTriggerEvent] = Field(
            default_factory=list, description="workload events faults may be triggered on")
        occurrences: tuple[int, int] = Field((1, 5), description="which occurrence of the event")
        durations: tuple[Seconds, Seconds] = Field((1.0, 5.0), description="durations of the faults that last a while "
                                                   "(seconds)")

        @model_validator(mode="after")
        def _check(self) -> ExploreBase:
            for name in ("step_window", "occurrences", "durations"):
                low, high = getattr(self, name)
                if low > high or low < (0 if name == "durations" else 1):
                    raise ValueError(f"{name}: expected [low, high] with 1 <= low <= high, got [{low}, {high}]")
            if self.targets == ["event_node"] and not self.events:
                raise ValueError("targets: event_node alone needs events to trigger on")
            given = [k for k, p in _EXPLORABLE.items() if p.explore_options is not None
                     and getattr(self, k, None) is not None and k not in self.kinds]
            if given:
                raise ValueError(f"{', '.join(given)}: bounds for a kind that is not in kinds (add it to kinds or drop "
                                 "the section)")
            return self


    # Each kind with explore bounds of its own gets `explore.<kind>: {...}` (e.g. explore.straggler.slowdowns).
    Explore = create_model(  # type: ignore[call-overload]
        "Explore", __base__=ExploreBase,
        **{name: (p.explore_options | None, Field(None, description=f"bounds of generated {name} faults"))
           for name, p in _EXPLORABLE.items() if p.explore_options is not None})
    class Scenario(Strict):
        __qualname__ = "Scenario"
        name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
        description: str = ""
        cluster: Cluster = Field(default_factory=Cluster)
        workload: Workload
        faults: list[Fault] = Field(default_factory=list, max_length=MAX_FAULTS)
        expect: Expect = Field(default_factory=Expect)
        checks: Checks = Field(default_factory=Checks)
        explore: Explore | None = Field(None, description="bounds for generated fault plans (chaos explore)")
        limits: Limits = Field(default_factory=Limits)
        storage: Storage = Field(default_factory=Storage)
        allow_paths: list[str] = Field(
            default_factory=list, description="absolute directories outside the run directory that torch-chaos may "
            "write and damage files in (e.g. a checkpoint_dir elsewhere); everything else stays in the run directory")

        @model_validator(mode="after")
        def _check(self, info: ValidationInfo) -> Scenario:
            """What one section cannot know alone: whether a fault's node exists, whether the runtime can do it,
            whether the workload's arguments are ones it takes, and whether its paths stay in the blast radius.
            Not asked of a run directory's stored copy (chaos.spec.STORED_RUN): it was judged when it ran."""
            if stored(info):
                return self
            c = self.cluster
            runtime = runtime_plugins()[c.runtime]
            plugins = fault_plugins()
            problems = [f"allow_paths[{i}]: {p}" for i, entry in enumerate(self.allow_paths)
                        if (p := check_allowed(entry))]
            problems += self._workload_problems()
            problems += self._rendezvous_problems(runtime)
            problems += _problems_from(runtime, "scenario_problems", self)
            launcher = launcher_of(c)
            if launcher.runtimes is not None and c.runtime not in launcher.runtimes:
                problems.append(f"cluster.runtime: the {c.launcher} launcher runs on "
                                f"{', '.join(sorted(launcher.runtimes))}; the {c.runtime} runtime is not one of them")
            problems += _problems_from(launcher, "scenario_problems", self)
            for i, fault in enumerate(self.faults):
                if isinstance(fault.target, int) and fault.target >= c.nodes:
                    problems.append(f"faults[{i}].target: node {fault.target} does not exist "
                                    f"(the cluster has nodes 0..{c.nodes - 1})")
                if fault.target == "rendezvous_host" and not launcher.rendezvous:
                    problems.append(f"faults[{i}].target: a {c.mode} job has no rendezvous host")
                if fault.kind in launcher.refused_faults:
                    problems.append(f"faults[{i}].kind: {fault.kind} does not apply to the {c.launcher} launcher: "
                                    f"{launcher.refused_faults[fault.kind]}")
                plugin = plugins[fault.kind]
                if fault.target == "store":
                    problems += [f"faults[{i}].target: {why}" for why in _store_target_problems(fault.kind, c, plugins)]
                elif isinstance(fault.target, str) and fault.target.startswith(SERVER_PREFIXES):
                    problems += [f"faults[{i}].target: {why}" for why in _server_target_problems(fault, c, plugins)]
                for need in sorted(plugin.needs - runtime.capabilities - _conditional(runtime)):
                    able = _able(need)
                    problems.append(f"faults[{i}].kind: {fault.kind} {_needs(need, c.runtime, able)}")
                if STORAGE_LAYER in plugin.needs and self.storage.layer in ("inotify", "off"):
                    problems.append(f"faults[{i}].kind: {fault.kind} acts through the storage layer's FUSE mount, "
                                    "which "
                                    f"storage.layer: {self.storage.layer} turns off; set storage.layer: auto or fuse")
                if (fault.on is not None and isinstance(self.workload, ShippedWorkload) and self.storage.layer
                        in ("inotify", "off") and layer_only_event(self.workload.name, fault.on.event)):
                    problems.append(f"faults[{i}].on.event: {self.workload.name}'s probe never reports "
                                    f"{fault.on.event}; only the storage layer's FUSE mount emits it, which "
                                    f"storage.layer: {self.storage.layer} turns off; set storage.layer: auto or fuse")
                problems += [f"faults[{i}].{problem}" for problem in _problems_from(plugin, "check", fault, self)]
                problems += [f"faults[{i}].{why}" for why in self._time_problems(fault)]
                if (layout := launch_layout(c)) in LAYOUTS and layout not in plugin.layouts:
                    problems.append(f"faults[{i}].kind: {layout_problem(plugin, layout)}")
            deadline = self.limits.deadline_s
            if c.node_restart.delay_s > deadline:
                problems.append(f"cluster.node_restart.delay_s: {c.node_restart.delay_s:g}s is longer than the run's "
                                f"deadline (limits.deadline_s: {deadline:g}s): no node would ever be replaced; "
                                "shorten it "
                                "or raise limits.deadline_s")
            if self.explore is not None:
                problems += self._explore_problems(runtime)
            if self.storage.passthrough:
                problems += self._passthrough_problems()
            if problems:
                raise ValueError("\n".join(problems))
            return self

        def _passthrough_problems(self) -> list[str]:
            """storage.passthrough's policy: the server sees no read or write, so nothing may need it to (a fault
            acting on them would silently never act), and nothing may be held (a held save with no write to hold
            it at would be held in the open, under the directory's lock)."""
            plugins, problems = fault_plugins(), []
            fix = "drop it or leave storage.passthrough out"
            if self.storage.layer not in ("fuse", "auto"):
                problems.append(f"storage.passthrough: needs storage.layer fuse or auto (it is a mode of the FUSE "
                                f"server), not {self.storage.layer}")
            for i, fault in enumerate(self.faults):
                if (why := data_path_fault(plugins[fault.kind], fault)) is not None:
                    problems.append(f"faults[{i}]: {fault.kind} acts on the data path ({why}), which "
                                    "storage.passthrough hands to the kernel: the server never sees those operations; "
                                    "limit its ops to open/fsync/rename/unlink, " + fix)
                if fault.on is not None and fault.on.event in LAYER_HELD_EVENTS:
                    problems.append(f"faults[{i}].on.event: {fault.on.event} is held by the storage layer until the "
                                    "fault lands, and storage.passthrough holds nothing (the server sees no write to "
                                    "hold a save at); " + fix)
            if self.explore is not None:
                for kind in self.explore.kinds:
                    if (why := data_path_fault(plugins[kind], None)) is not None:
                        problems.append(f"explore.kinds: {kind} may be generated acting on the data path ({why}), "
                                        "which storage.passthrough hands to the kernel; " + fix)
                held = sorted(set(self.explore.events) & LAYER_HELD_EVENTS)
                if held:
                    problems.append(f"explore.events: {', '.join(held)} would be held by the storage layer, and "
                                    "storage.passthrough holds nothing; " + fix)
            return problems

        def _time_problems(self, fault: Any) -> list[str]:
            """A fault's lengths of time (its duration, a latency, a wait: every ``Seconds`` field but the trigger
            ``at``) longer than the run's deadline: the engine or a stalled operation would still be waiting on them
            when the run must end (slow_io latency: 1e300s held every checkpoint operation past the heal). Said with
            the field; a time of the kind's default is said so."""
            deadline = self.limits.deadline_s
            problems = []
            for name in time_fields(type(fault)):
                value = getattr(fault, name)
                if name == "at" or not isinstance(value, (int, float)) or value <= deadline:
                    continue  # at: a trigger after the deadline is one the run reports as never reached
                default = "" if name in fault.model_fields_set else " (the kind's default)"
                hint = (" (leave duration out for a fault that lasts until the run ends)"
                        if name == "duration" and getattr(fault, "DURATION", "none") == "optional" else "")
                problems.append(f"{name}: {value:g}s{default} is longer than the run's deadline (limits.deadline_s: "
                                f"{deadline:g}s), which every time of a fault must fit in; shorten it{hint} or raise "
                                "limits.deadline_s")
            return problems

        def _explore_problems(self, runtime: Any) -> list[str]:
            """The explore bounds judged like a plan's faults: every plan drawn from them must be one this scenario
            accepts (a kind the runtime can do, a target that exists and that the kind can act on)."""
            c, bounds, plugins = self.cluster, self.explore, fault_plugins()
            assert bounds is not None
            problems = []
            for target in bounds.targets:
                if isinstance(target, int) and target >= c.nodes:
                    problems.append(f"explore.targets: node {target} does not exist (the cluster has nodes "
                                    f"0..{c.nodes - 1})")
                elif target == "rendezvous_host" and not launcher_of(c).rendezvous:
                    problems.append(f"explore.targets: a {c.mode} job has no rendezvous host")
                elif target == "store" or (isinstance(target, str) and target.startswith(SERVER_PREFIXES)):
                    able = [k for k in bounds.kinds if getattr(plugins[k], "acts_on_store", False)]
                    if not able:
                        problems.append(f"explore.targets: {target}: none of explore.kinds can act on it; kinds that "
                                        "can: " + ", ".join(sorted(k for k, p in plugins.items()
                                                                   if getattr(p, "acts_on_store", False))))
                        continue
                    probe = _Target(kind=able[0], target=target)
                    why = (_store_target_problems(able[0], c, plugins) if target == "store"
                           else _server_target_problems(probe, c, plugins))
                    problems += [f"explore.targets: {target}: {w}" for w in why]
            if bounds.durations[1] > self.limits.deadline_s:
                problems.append(f"explore.durations: {bounds.durations[1]:g}s is longer than the run's deadline "
                                f"(limits.deadline_s: {self.limits.deadline_s:g}s), which every generated fault must "
                                "fit in; lower it or raise limits.deadline_s")
            layout = launch_layout(c)
            for kind in bounds.kinds:
                plugin = plugins[kind]
                if layout in LAYOUTS and layout not in plugin.layouts:
                    problems.append(f"explore.kinds: {layout_problem(plugin, layout)}")
                if kind in launcher_of(c).refused_faults:
                    problems.append(f"explore.kinds: {kind} does not apply to the {c.launcher} launcher: "
                                    f"{launcher_of(c).refused_faults[kind]}")
                for name in time_fields(plugin.options):  # a kind's own default time, which every generated fault has
                    default = plugin.options.model_fields[name].get_default(call_default_factory=True)
                    if name not in ("at", "duration") and isinstance(default, (int, float)) and (
                            default > self.limits.deadline_s):
                        problems.append(f"explore.kinds: {kind}'s {name} ({default:g}s, its default) is longer "
                                        "than the "
                                        f"run's deadline (limits.deadline_s: {self.limits.deadline_s:g}s); raise "
                                        "limits.deadline_s")
                for need in sorted(plugin.needs - runtime.capabilities - _conditional(runtime)):
                    able = _able(need)
                    problems.append(f"explore.kinds: {kind} {_needs(need, c.runtime, able)}")
                if STORAGE_LAYER in plugin.needs and self.storage.layer in ("inotify", "off"):
                    problems.append(f"explore.kinds: {kind} acts through the storage layer's FUSE mount, which "
                                    f"storage.layer: {self.storage.layer} turns off")
                if plugin.options.TARGET == "node" and not explore_targets(plugin, bounds, c.nodes):
                    problems.append(f"explore.kinds: {kind} can take none of explore.targets "
                                    f"({', '.join(map(str, bounds.targets))})")
                try:
                    section = plugin.explore_bounds(bounds)
                except Exception as exc:  # as in _problems_from
                    problems.append(f"explore.kinds: {raised_by(plugin, 'explore_bounds', exc)}")
                    continue
                problems += [f"explore.{kind}.{why}" for why in _problems_from(plugin, "check_explore", section, self)]
            return problems

        def _rendezvous_problems(self, runtime: Any) -> list[str]:
            c = self.cluster
            backend = rendezvous_plugins()[c.rendezvous.backend]
            if not launcher_of(c).rendezvous:
                return []
            problems = []
            for need in sorted(backend.needs - runtime.capabilities):
                able = [n for n, r in runtime_plugins().items() if need in r.capabilities]
                problems.append(f"cluster.rendezvous.backend: {backend.name} {_needs(need, c.runtime, able)}")
            if not backend.uses_c10d_store and c.rendezvous.store != "node0":
                problems.append(f"cluster.rendezvous.store: {backend.name} keeps the rendezvous in its own servers, "
                                "not in a c10d store; store applies to backend: c10d only")
            if backend.server_prefix is None and c.rendezvous.members is not None:
                problems.append(f"cluster.rendezvous.members: {backend.name} runs no servers of its own; members "
                                "applies to backends that do (" + ", ".join(
                                    n for n, b in rendezvous_plugins().items() if b.server_prefix) + ")")
            return problems

        def _workload_problems(self) -> list[str]:
            w = self.workload
            if isinstance(w, ShippedWorkload):
                found = [f"workload.args.{name}: {why}" for name, why in arg_problems(SHIPPED[w.name], w.args).items()]
                directory = w.args.get("checkpoint_dir")
                if isinstance(directory, str) and (why := check_path(directory, self.allow_paths)):
                    found.append(f"workload.args.checkpoint_dir: {why}")
                return found
            if w.checkpoint_dir is not None and (why := check_path(w.checkpoint_dir, self.allow_paths)):
                return [f"workload.checkpoint_dir: {why}"]
            return []

    return {name: value for name, value in locals().items() if name in _BUILT}


@functools.cache
def model() -> Any:
    """The scenario model, built from the registered plug-ins once; its parts become attributes of this module."""
    globals().update(_build())
    return globals()["Scenario"]


def _part(name: str) -> Any:
    model()
    return globals()[name]


def __getattr__(name: str) -> Any:
    """``chaos.scenario.Scenario`` and the other parts made from the plug-ins, built on first use (PEP 562)."""
    if name in _BUILT:
        return _part(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
