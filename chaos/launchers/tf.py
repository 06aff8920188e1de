"""TensorFlow's MultiWorkerMirroredStrategy as a launcher: one TF worker per node, the engine its supervisor.

Every node runs the workload's command once, with a ``TF_CONFIG`` naming every node's worker (``address:port``;
on the local runtime all nodes share 127.0.0.1, so each gets a port of its own; on netns and docker each node has
its own address and they share one port) and its own task index, ``TF_USE_LEGACY_KERAS=1`` (Keras 3 fails under
MultiWorkerMirroredStrategy with TF 2.21, keras-team/keras#20585: tf-keras is the Keras that works), and ``RANK`` /
``WORLD_SIZE`` set to the task index and the worker count so the probe names each worker's rank.

MWMS is not elastic: a lost worker makes every other one fail in its next collective (measured: SIGKILL of worker 1
→ worker 0 raised ``UnavailableError`` 0.06 s later and exited 1 at 0.8 s; a frozen worker → the others aborted
after ~5.5 s, "tasks are unhealthy"). Nothing in TF restarts a worker: the orchestrator is the engine's
``cluster.node_restart``, which replaces every node that exited non-zero, so the killed node *and* the survivors
that failed with it are relaunched, each after ``delay_s``, and the new group resumes from ``BackupAndRestore``'s
backup. A node that finished (exit 0) is never relaunched (chaos.engine.nodes), which is right: a worker finishes
only when the whole group finished training. No group-level relaunch is needed as long as survivors fail rather
than hang; ``pg_timeout_s`` (``CommunicationOptions.timeout_seconds``) bounds a collective that waits on a peer.

Each node's process is its own worker (no agent between the engine and TF): kinds that kill a worker under a
surviving launcher (``kill_worker``, ``oom_kill``) or order one LOCAL_RANK to hang (``hang``) are refused with what
to use instead; ``crash`` and ``freeze`` act on the worker itself.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.machine import Check
from chaos.plan import NodePlan, free_port, node_argv, repo_pythonpath

if TYPE_CHECKING:
    import psutil

    from chaos.scenario import Scenario

TF_VERSION = "2.21.0"
PACKAGES = (f"tensorflow=={TF_VERSION}", f"tf-keras=={TF_VERSION}")
_OWN_PROCESS = ("each node's process is its own TF worker (no launcher beside it that would survive and restart "
                "it): use crash (SIGKILL to the worker, the same effect)")


def tf_config(addresses: list[str], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``addresses`` (``host:port``, in task order)."""
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}},
                      separators=(",", ":"))


def worker_addresses(hosts: list[str], first_port: int, port_for: Any = free_port) -> list[str]:
    """One ``host:port`` per worker: nodes with their own address (netns, docker) share ``first_port``; nodes that
    share an address (local: 127.0.0.1) get distinct ports (``first_port`` for the first, then free ones)."""
    if len(set(hosts)) == len(hosts):
        return [f"{h}:{first_port}" for h in hosts]
    ports: list[int] = [first_port]
    while len(ports) < len(hosts):
        port = int(port_for())
        if port not in ports:
            ports.append(port)
    return [f"{h}:{p}" for h, p in zip(hosts, ports, strict=True)]


def tf_versions() -> tuple[dict[str, str] | None, str]:
    """(tensorflow's and tf-keras's installed versions, or None when either is missing, why). From the installed
    metadata, not an import: importing TensorFlow takes ~7 s of CPU here, and every ``chaos run`` asks."""
    found = {}
    for dist in ("tensorflow", "tf-keras"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None, f"{dist} is not installed"
    return found, ""


class TfMultiWorker(Launcher):
    name = "tf-multiworker"
    summary = ("TensorFlow MultiWorkerMirroredStrategy: one worker per node (TF_CONFIG written by the engine), the "
               "group relaunched by cluster.node_restart")
    mode = "tf-multiworker"
    orchestrator = ("the engine (cluster.node_restart relaunches every worker that failed: the lost one and the "
                    "survivors whose collectives failed with it; BackupAndRestore resumes the epoch)")
    runtimes = frozenset({"local", "netns", "docker"})
    # No node whose loss differs from any other's (no single_point_node): every worker's loss stops the group, and
    # the relaunched group resumes from the backup either way. Measured: the chief's crash cost what a worker's did.
    single_point_of_failure = ("none among the workers: any worker's loss stops the whole group, the chief's "
                               "(worker 0: it writes the backup and hosts the coordination service) included, and "
                               "the group is relaunched the same way; what the job cannot lose is its supervisor "
                               "(here the engine's node_restart; a TFJob's controller in production)")
    refused_faults: ClassVar[dict[str, str]] = {
        "kill_worker": _OWN_PROCESS,
        "oom_kill": "it makes the kernel kill a worker process with a LOCAL_RANK, and a TF worker has none; use "
                    "memory_pressure or crash",
        "hang": "the probe's hang order names a LOCAL_RANK under a launcher, and a TF worker has none; use freeze "
                "(SIGSTOP of the worker: the others abort after ~5.5 s, measured)",
    }
    levers: ClassVar[dict[str, str]] = {
        "detection": "the survivors' next collective fails on the lost peer (UnavailableError, ~0.1-0.8 s after a "
                     "kill, measured); a frozen peer is noticed by MWMS's health check (~5.5 s) or the collective's "
                     "timeout (tf-mlp's pg_timeout_s: CommunicationOptions.timeout_seconds)",
        "restart": "cluster.node_restart.delay_s, then TF's start-up (import, the strategy's cluster connect) and "
                   "BackupAndRestore's restore of the last epoch's backup",
    }

    @classmethod
    def image_packages(cls) -> tuple[str, ...]:
        return PACKAGES

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        c = scenario.cluster
        problems = []
        if c.procs_per_node != 1:
            problems.append("cluster.procs_per_node: a tf-multiworker node runs one TF worker (MWMS uses every core "
                            "of its process); set procs_per_node: 1 and more nodes instead")
        w = scenario.workload
        if getattr(w, "name", None) == "ddp-mlp":
            problems.append("workload.name: ddp-mlp is a PyTorch job started by torchrun or as one process; under "
                            "tf-multiworker use tf-mlp (workloads/tf_train.py) or your own TF script "
                            "(workload.command)")
        return problems

    @classmethod
    def machine_checks(cls) -> list[Check]:
        versions, why = tf_versions()
        fix = 'pip install "torch-chaos[tf]"'
        if versions is None:
            return [Check("tensorflow", False, f"not importable: {why}", fix)]
        tf_v, keras_v = versions["tensorflow"], versions["tf-keras"]
        same = tf_v.split(".")[:2] == keras_v.split(".")[:2]
        detail = f"tensorflow {tf_v}, tf-keras {keras_v}" + (
            "" if same else " (tf-keras must match tensorflow's major.minor: Keras 3 fails under MWMS)")
        return [Check("tensorflow", same, detail, "" if same else fix)]

    def node_plans(self, ctx: LaunchContext) -> Launch:
        c, net = ctx.scenario.cluster, ctx.net
        names = [f"node{i}" for i in range(c.nodes)]
        workers = worker_addresses([net.addresses[n] for n in names], net.store_port)
        argv = node_argv(ctx.script, ctx.python)
        path = repo_pythonpath(ctx.base_env)
        nodes = []
        for i, name in enumerate(names):
            env = {**ctx.base_env, **net.env, "CHAOS_NODE": name, "PYTHONPATH": path,
                   "TF_CONFIG": tf_config(workers, i), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "RANK": str(i), "WORLD_SIZE": str(c.nodes), "PYTHONUNBUFFERED": "1"}
            nodes.append(NodePlan(name, i, list(argv), env, cpus=ctx.pinned.get(name)))
        return Launch(nodes, store_port=net.store_port)

    def select_workers(self, tree: list[psutil.Process], node_pid: int) -> list[psutil.Process]:
        return []  # the node's process is the TF worker itself

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "packages": list(PACKAGES)}
