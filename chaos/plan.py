"""The resolved plan: exactly what a run will execute (commands, environment, fault timeline).

The engine runs this plan and ``chaos run --dry-run`` prints it, so what a user reviews is what runs.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.launchers.base import LaunchContext
from chaos.paths import confine, not_a_directory
from chaos.registry import launcher_of, rendezvous_plugins
from chaos.workload import CommandWorkload, ShippedWorkload
from chaos.workload_args import as_text

# Plug-ins import this module while the scenario model is built from them, so it imports chaos.scenario for types only.
if TYPE_CHECKING:
    from chaos.launchers.base import Launcher
    from chaos.scenario import Scenario
    from chaos.spec import FaultSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED_WORKLOADS = {"ddp-mlp": REPO_ROOT / "workloads" / "train.py",
                     "ray-mlp": REPO_ROOT / "workloads" / "ray_train.py",
                     "tf-mlp": REPO_ROOT / "workloads" / "tf_train.py",
                     "flower-mlp": REPO_ROOT / "workloads" / "flower_train.py"}

# Measured here to recover from a node crash in ~8 s (torchrun's defaults: ~46 s).
# See docs/design.md, "Runtimes and fault mechanisms".
TUNED = {
    "join_timeout_s": 60, "last_call_timeout_s": 2, "close_timeout_s": 5, "keep_alive_interval_s": 1,
    "keep_alive_max_attempt": 3, "read_timeout_s": 10, "max_restarts": 100, "process_group_timeout_s": 10,
    "share_rendezvous_store": False,
}
# torchrun's own values, written out so the plan shows what is in force.
TORCHRUN_DEFAULTS = {
    "join_timeout_s": 600, "last_call_timeout_s": 30, "close_timeout_s": 30, "keep_alive_interval_s": 5,
    "keep_alive_max_attempt": 3, "read_timeout_s": 60, "max_restarts": 0, "process_group_timeout_s": 1800,
    "share_rendezvous_store": True,
}
# The tuned rendezvous timeouts hold up to this many nodes on one host; above it they grow in proportion
# (nodes / TUNED_NODES), see scaled_for_nodes.
TUNED_NODES = 8
# Measured (issue 36, 2 cores): with the fixed values 8-24 nodes passed, at 28 the survivors' re-rendezvous hit the
# 60 s join timeout and at 32 and 40 the rendezvous timed out although every agent had joined within a second: every
# agent's start (torchrun, then `import torch` in its worker) and every store operation queue for the same cores, so
# what a timeout must cover grows with the node count. The keep-alive interval grows too: each keep-alive rewrites
# the rendezvous state, whose size is the participants', so n agents cost the store O(n^2) per interval. The
# process group's timeout covers a new world's first collective, which waits for every worker's `import torch`.
SCALED_WITH_NODES = ("join_timeout_s", "last_call_timeout_s", "read_timeout_s", "keep_alive_interval_s",
                     "process_group_timeout_s")
RDZV_CONF = {"join_timeout_s": "join_timeout", "last_call_timeout_s": "last_call_timeout",
              "close_timeout_s": "close_timeout", "keep_alive_interval_s": "keep_alive_interval",
              "keep_alive_max_attempt": "keep_alive_max_attempt", "read_timeout_s": "read_timeout"}
STORE_NODE = "store"
# Environment variables whose value is a secret of the run: in the nodes' environment only (a process's environ is
# readable by its user alone), never in a record (plan.yaml, run_started, the dry run's output) that others read.
SECRET_ENV = ("CHAOS_CHANNEL_TOKEN",)
NOT_RECORDED = "(secret: in the nodes' environment only)"


@dataclass
class NodePlan:
    name: str
    index: int | None
    argv: list[str]
    env: dict[str, str]
    role: str = "node"  # node | store | server (a rendezvous backend's: an etcd member)
    cpus: list[int] | None = None  # the cores the node's whole process tree is pinned to (None: not pinned)

    def to_dict(self) -> dict[str, Any]:
        env = {k: NOT_RECORDED if k in SECRET_ENV else v for k, v in self.env.items()}
        out: dict[str, Any] = {"name": self.name, "role": self.role, "argv": self.argv, "env": env}
        if self.cpus is not None:
            out["cpus"] = list(self.cpus)
        return out


@dataclass
class Plan:
    scenario: Scenario
    run_id: str
    run_dir: Path
    checkpoint_dir: Path | None
    nodes: list[NodePlan]
    store: NodePlan | None
    elastic: dict[str, Any]
    pause_on: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    store_port: int | None = None
    resources: dict[str, Any] = field(default_factory=dict)  # what pin_cpus decided (result.json `resources`)
    # Servers the rendezvous backend runs (etcd members), started before the nodes (RendezvousBackend.servers).
    servers: list[NodePlan] = field(default_factory=list)
    channel: str | None = None  # host:port where the engine listens for the history channel (CHAOS_CHANNEL)
    # the secret every sender shows in its hello (CHAOS_CHANNEL_TOKEN): only this run's processes may write its history
    channel_token: str | None = None
    # the launcher that built the nodes' commands (chaos.launchers): runtimes ask it for a node's workers
    launcher: Launcher | None = None

    @property
    def store_host(self) -> str | None:
        """The node whose network stack serves the rendezvous store (None for a centralized job)."""
        if not launcher_of(self.scenario.cluster).rendezvous:
            return None
        return STORE_NODE if self.store is not None else "node0"

    def node(self, name: str) -> NodePlan:
        for n in self.nodes + ([self.store] if self.store else []) + self.servers:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "mode": self.scenario.cluster.mode,
            "launcher": launcher_of(self.scenario.cluster).name,
            "runtime": self.scenario.cluster.runtime,
            "elastic_settings": self.elastic,
            "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else None,
            "addresses": self.addresses,
            "resources": self.resources,
            "store": self.store.to_dict() if self.store else None,
            **({"servers": [n.to_dict() for n in self.servers]} if self.servers else {}),
            "nodes": [n.to_dict() for n in self.nodes],
            "faults": [fault_summary(i, f) for i, f in enumerate(self.scenario.faults)],
            **({"checkpoint_commit_file": commit} if (commit := launcher_of(self.scenario.cluster)
                                                       .checkpoint_commit_file) else {}),
        }


def fault_summary(index: int, fault: FaultSpec) -> dict[str, Any]:
    if fault.at is not None:
        trigger = f"{fault.at:g}s after the first step"
    elif fault.at_step is not None:
        trigger = f"when step {fault.at_step} completes"
    else:
        assert fault.on is not None
        trigger = f"on {fault.on.event} #{fault.on.occurrence}"
    out: dict[str, Any] = {"id": index, "kind": fault.kind, "target": fault.target, "trigger": trigger}
    if fault.seed is not None:
        out["seed"] = fault.seed
    if fault.duration is not None:
        out["duration_s"] = fault.duration
    if fault.optional:
        out["optional"] = True
    out.update(fault.options())
    return out


def host_cpus() -> list[int]:
    """The cores this engine may run on (its own affinity: a container's cpuset or a taskset narrows it)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def pin_cpus(nodes: int, cpus: int | None, available: list[int], allow_oversubscribe: bool = False,
             names: list[str] | None = None) -> dict[str, Any]:
    """Which cores each node gets: ``cpus`` consecutive cores of ``available`` per node, disjoint across nodes.

    Returned as result.json's ``resources``: ``cpus_per_node`` (None: not pinned, every node may use every core),
    ``host_cpus`` (the cores there were), ``nodes`` (name → cores), ``oversubscribed`` (some core serves two nodes),
    ``shared_cores`` (nodes can run on the same core: unpinned with more than one node, or oversubscribed).
    A shape the host cannot give is a PlanError naming the field, unless oversubscription is allowed; then cores
    are dealt round-robin and the plan says so."""
    names = names or [f"node{i}" for i in range(nodes)]
    if cpus is None:
        return {"cpus_per_node": None, "host_cpus": list(available), "nodes": {}, "oversubscribed": False,
                "shared_cores": nodes > 1}
    want = nodes * cpus
    if cpus > len(available) or (want > len(available) and not allow_oversubscribe):
        shown = ",".join(map(str, available))
        raise PlanError(
            f"cluster.resources.cpus: {nodes} node(s) × {cpus} core(s) = {want} cores to pin, but this host gives "
            f"{len(available)} ({shown}); lower cluster.nodes or cluster.resources.cpus"
            + ("" if cpus > len(available) else ", or set cluster.resources.allow_oversubscribe: true (nodes then "
               "share cores and the run is flagged oversubscribed)"))
    pinned = {name: [available[(i * cpus + k) % len(available)] for k in range(cpus)]
              for i, name in enumerate(names)}
    over = want > len(available)
    return {"cpus_per_node": cpus, "host_cpus": list(available), "nodes": pinned, "oversubscribed": over,
            "shared_cores": over}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scaled_for_nodes(nodes: int) -> dict[str, Any]:
    """The tuned preset for ``nodes`` nodes: up to ``TUNED_NODES`` as measured, above it the rendezvous timeouts
    (join, last call, store read, keep-alive interval) and the process group's multiplied by
    ``nodes / TUNED_NODES``."""
    factor = max(1.0, nodes / TUNED_NODES)
    settings = dict(TUNED)
    for key in SCALED_WITH_NODES:
        settings[key] = round(TUNED[key] * factor, 1)
    return settings


def elastic_settings(scenario: Scenario) -> dict[str, Any]:
    """Preset values (the tuned ones scaled with the node count) with every explicit scenario override on top."""
    c = scenario.cluster
    settings = scaled_for_nodes(c.nodes) if c.preset == "tuned" else dict(TORCHRUN_DEFAULTS)
    for key in RDZV_CONF:
        value = getattr(c.rendezvous, key)
        if value is not None:
            settings[key] = value
    for key in ("max_restarts", "process_group_timeout_s", "share_rendezvous_store"):
        value = getattr(c, key)
        if value is not None:
            settings[key] = value
    return settings


def fmt_arg(v: Any) -> str:
    return as_text(v)


def workload_argv(scenario: Scenario, checkpoint_dir: Path | None, settings: dict[str, Any]) -> list[str]:
    w = scenario.workload
    if isinstance(w, CommandWorkload):
        return list(w.command)
    assert isinstance(w, ShippedWorkload)
    args = {"checkpoint_dir": str(checkpoint_dir), "pg_timeout_s": settings["process_group_timeout_s"], **w.args}
    argv = [str(SHIPPED_WORKLOADS[w.name])]
    for key, value in args.items():
        argv += [f"--{key.replace('_', '-')}", fmt_arg(value)]
    return argv


class PlanError(ValueError):
    """The scenario is valid on its own but cannot be turned into commands (a user mistake, exit code 2)."""


def is_python(argv: list[str]) -> bool:
    return argv[0].endswith(".py") or (Path(argv[0]).name.startswith("python") and len(argv) > 1)


def node_argv(script: list[str], python: str) -> list[str]:
    """The job's command as one node process runs it (launchers without torchrun: Ray's driver, a TF worker, a
    Flower node): a script path runs under the nodes' interpreter, ``[python, ...]`` gets that interpreter (a
    container has its own), anything else runs as written."""
    if script[0].endswith(".py"):  # a shipped workload's script, or `[train.py, ...]`
        return [python, *script]
    if is_python(script):
        return [python, *script[1:]]
    return list(script)


def repo_pythonpath(base_env: dict[str, str]) -> str:
    """PYTHONPATH for a node: the repository first (chaos.probe and the launchers' node modules), then the job's."""
    return os.pathsep.join(p for p in (str(REPO_ROOT), base_env.get("PYTHONPATH", "")) if p)


def python_script(argv: list[str]) -> list[str]:
    """torchrun starts a Python script on every node: accept ``[train.py, ...]``, ``[python, train.py, ...]`` or
    ``[python, -m, package.module, ...]`` (torchrun's own ``-m``); other interpreter options such as ``-c`` have no
    torchrun equivalent and are refused with what to write instead."""
    if argv[0].endswith(".py"):
        return argv
    if Path(argv[0]).name.startswith("python") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            return argv[1:]
        if argv[1].startswith("-"):
            raise PlanError(f"workload.command: python {argv[1]} cannot be started by torchrun, which runs a script "
                            "file (or -m module) on every node; put the code in a file and write "
                            "command: [python, train.py, ...]")
        return argv[1:]
    if Path(argv[0]).name == "env":
        assignments = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv[1:] if "=" in a and not a.startswith("-")}
        raise PlanError("workload.command: an elastic job runs a Python script under torchrun, which cannot start "
                        "`env`; give the variables as workload.env instead, e.g. env: {"
                        + (", ".join(f"{k}: {v!r}" for k, v in assignments.items()) or "NAME: value")
                        + "} and command: [python, train.py, ...]")
    raise PlanError("workload.command: an elastic job runs a Python script under torchrun; "
                    "write command: [python, train.py, ...]")


def rendezvous_server_names(cluster: Any) -> list[str]:
    """The names of the servers the cluster's rendezvous backend runs (``etcd0``..), none for c10d or a
    centralized job: fault targets, and endpoints with an address of their own on netns and docker."""
    backend = rendezvous_plugins()[cluster.rendezvous.backend]
    if not launcher_of(cluster).rendezvous or not backend.server_prefix:
        return []
    return [f"{backend.server_prefix}{i}" for i in range(cluster.rendezvous.members or backend.default_members)]


def node_names(scenario: Scenario) -> list[str]:
    """Every network endpoint a run has: its nodes, then the dedicated store when there is one, then the
    rendezvous backend's servers (etcd members)."""
    c = scenario.cluster
    names = [f"node{i}" for i in range(c.nodes)]
    if launcher_of(c).rendezvous and c.rendezvous.store == "dedicated":
        names.append(STORE_NODE)
    return names + rendezvous_server_names(c)


# Runtimes that give every node a network stack of its own: the store listens on a fixed port at its node's
# address, and gloo/NCCL are told which interface is theirs.
OWN_STACK_STORE_PORT = 29400
OWN_STACK_ENV = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}


@dataclass
class Addressing:
    """Where nodes live on the network: one shared loopback (local) or an address per node (netns, docker)."""

    addresses: dict[str, str]
    store_port: int
    python: str = sys.executable  # the interpreter nodes run (a container has its own)
    # gloo and NCCL find their own address from the hostname, which is loopback (netns: one shared hostname);
    # nodes with an interface of their own name it here.
    env: dict[str, str] = field(default_factory=dict)
    # The engine's side of the nodes' network, where it listens for the history channel (chaos/channel.py): an
    # address every node reaches, and no more of the machine than that (loopback for local nodes).
    channel_host: str = "127.0.0.1"
    channel_port: int = field(default_factory=lambda: free_port())
    channel_token: str = field(default_factory=lambda: secrets.token_hex(16))

    @classmethod
    def loopback(cls, scenario: Scenario) -> Addressing:
        return cls({n: "127.0.0.1" for n in node_names(scenario)}, free_port())

    @property
    def channel(self) -> str:
        return f"{self.channel_host}:{self.channel_port}"


def build_plan(scenario: Scenario, run_id: str, run_dir: Path, net: Addressing | None = None) -> Plan:
    c = scenario.cluster
    net = net or Addressing.loopback(scenario)
    r = c.resources
    resources = pin_cpus(c.nodes, r.cpus, host_cpus(), r.allow_oversubscribe)
    pinned: dict[str, list[int]] = resources["nodes"]
    settings = elastic_settings(scenario)
    w = scenario.workload
    if isinstance(w, ShippedWorkload):
        checkpoint_dir: Path | None = run_dir / "checkpoints"
    else:
        # relative to the run directory, which is every node's working directory
        checkpoint_dir = (run_dir / w.checkpoint_dir).resolve() if w.checkpoint_dir else None
    if isinstance(w, ShippedWorkload) and isinstance(w.args.get("checkpoint_dir"), str):
        checkpoint_dir = (run_dir / w.args["checkpoint_dir"]).resolve()
    if checkpoint_dir is not None and (why := confine(checkpoint_dir, run_dir, scenario.allow_paths)):
        raise PlanError(f"checkpoint_dir: {why}")
    if checkpoint_dir is not None and (why := not_a_directory(checkpoint_dir)):
        field = "workload.checkpoint_dir" if isinstance(w, CommandWorkload) else "workload.args.checkpoint_dir"
        raise PlanError(f"{field}: {why}")
    pause_on = sorted({f.on.event for f in scenario.faults if f.on is not None})
    # The workload's own variables first: what torch-chaos sets wins (validation refuses those names anyway).
    base_env = {
        **(w.env if isinstance(w, CommandWorkload) else {}),
        "CHAOS_EVENTS": str(run_dir / "events.jsonl"),
        # Events and holds travel over the engine's channel; the spool stays on the node (the run directory is
        # node-local for local, netns and docker nodes alike: containers mount it at the same path).
        "CHAOS_CHANNEL": net.channel,
        "CHAOS_CHANNEL_TOKEN": net.channel_token,
        "CHAOS_SPOOL_DIR": str(run_dir / "spool"),
        "CHAOS_RUN_ID": run_id,
        "OMP_NUM_THREADS": str(c.threads_per_proc),
        "PYTHONUNBUFFERED": "1",
        **net.env,
    }
    if pause_on:
        base_env["CHAOS_PAUSE_ON"] = ",".join(pause_on)
    pause_steps = sorted({f.at_step for f in scenario.faults if f.at_step is not None})
    if pause_steps:
        base_env["CHAOS_PAUSE_AT_STEPS"] = ",".join(map(str, pause_steps))
    script = workload_argv(scenario, checkpoint_dir, settings)
    # The launcher (cluster.launcher, or the one cluster.mode names) builds each node's command from these parts.
    launcher = launcher_of(c)()
    launch = launcher.node_plans(LaunchContext(scenario, run_id, run_dir, net, base_env, script, settings, pinned))
    return Plan(scenario, run_id, run_dir, checkpoint_dir, launch.nodes, launch.store, settings, pause_on,
                net.addresses, launch.store_port, servers=launch.servers, resources=resources, channel=net.channel,
                channel_token=net.channel_token, launcher=launcher)
