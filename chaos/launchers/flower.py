"""Flower (``flwr``) federated learning as a launcher: node0 runs the Flower server, every other node one client.

Each node runs the workload's command once, with ``FLOWER_ROLE`` (``server`` on node0, ``client`` elsewhere) and
``FLOWER_SERVER_ADDRESS`` (node0's address and the port the plan chose), ``RANK`` set to the node's index (the
server is rank 0: its rounds are the job's steps; a client's rank names its data shard). The reference workload
(``flower-mlp``: workloads/flower_train.py) uses Flower's ``start_server`` / ``start_client``: in flwr 1.42 they
are still shipped (``flwr.compat``, deprecated in favour of SuperLink + SuperNode + ``flwr run``), and they are the
mode that maps one node to one process with no state of its own beside it. The SuperLink way needs three kinds of
process (SuperLink, one SuperNode per client, then ``flwr run`` submitting a built Flower app to the SuperLink) and
keeps the run's state in the SuperLink: a crash of node0 would then mean two processes and a database, and none
of it adds a recovery path (the ServerApp's strategy state is gone with its process either way).

Who restarts: nobody in Flower. A client lost mid-round is a failure of that round; FedAvg
(``accept_failures=True``) aggregates the others and the next round samples among the clients still connected
(the "client drop" recovery: no restart at all). A frozen client is a failure once the round's timeout passes
(``ServerConfig.round_timeout``: ``pg_timeout_s``). The engine's ``cluster.node_restart`` may relaunch a crashed
client (it connects again and rejoins the pool) or the server; a relaunched server goes on only if the ServerApp
saved and restores the global model (flower-mlp does, after every round): Flower keeps no server state across a
restart, so without the engine's restart (or with a ServerApp that does not restore), the server is the single
point of failure: its clients lose their connection and exit, and training ends.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.machine import Check
from chaos.plan import NodePlan, node_argv, repo_pythonpath

if TYPE_CHECKING:
    import psutil

    from chaos.scenario import Scenario

FLWR_VERSION = "1.42.0"
PACKAGES = (f"flwr=={FLWR_VERSION}",)
_OWN_PROCESS = ("each node's process is the Flower server or client itself (no agent beside it that would survive "
                "and restart it): use crash (SIGKILL to the node's process, the same effect)")


def flwr_version() -> tuple[str | None, str]:
    """(flwr's installed version, or None when it is missing, why), from the installed metadata (no import)."""
    try:
        return importlib.metadata.version("flwr"), ""
    except importlib.metadata.PackageNotFoundError:
        return None, "flwr is not installed"


class Flower(Launcher):
    name = "flower"
    summary = ("Flower federated learning: node0 the server (FedAvg rounds), every other node a client; a lost "
               "client is a round's failure, the server a single point of failure")
    mode = "federated"
    orchestrator = ("nobody in Flower: FedAvg aggregates a round without a lost client and samples among those left; "
                    "cluster.node_restart may relaunch a client (it rejoins) or the server (it resumes only from a "
                    "global model the ServerApp saved)")
    runtimes = frozenset({"local", "netns", "docker"})
    single_point_of_failure = ("node0 (the Flower server: it holds the global model and drives every round; its "
                               "clients exit when it is gone, and Flower keeps no server state across a restart)")
    single_point_node = "node0"
    refused_faults: ClassVar[dict[str, str]] = {
        "kill_worker": _OWN_PROCESS,
        "oom_kill": "it makes the kernel kill a worker process with a LOCAL_RANK, and a Flower node runs one process "
                    "without one; use memory_pressure or crash",
        "hang": "the probe's hang order names a LOCAL_RANK at a training step, and a Flower client reports no steps "
                "(the server reports rounds); use freeze (SIGSTOP of a client: the round counts it as a failure "
                "after its round_timeout)",
    }
    levers: ClassVar[dict[str, str]] = {
        "detection": "a killed client: its gRPC stream closes and the round records a failure at once; a silent "
                     "(frozen, partitioned) client: ServerConfig.round_timeout (flower-mlp's pg_timeout_s); a lost "
                     "server: each client's stream fails and it exits",
        "restart": "none inside Flower: the next round samples among the connected clients (clients_per_round must "
                   "still be connected); cluster.node_restart relaunches a node, and a relaunched client waits for "
                   "the next round's sampling",
    }

    @classmethod
    def layout(cls, cluster: Any) -> str:
        return cls.name

    @classmethod
    def image_packages(cls) -> tuple[str, ...]:
        return PACKAGES

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        c = scenario.cluster
        problems = []
        if c.nodes < 2:
            problems.append("cluster.nodes: node0 is the Flower server and trains nothing; set nodes: 2 or more (one "
                            "client per node beyond node0)")
        if c.procs_per_node != 1:
            problems.append("cluster.procs_per_node: a Flower node runs one process (the server or one client); set "
                            "procs_per_node: 1 and more nodes for more clients")
        w = scenario.workload
        name = getattr(w, "name", None)
        if name in ("ddp-mlp", "ray-mlp", "tf-mlp"):
            problems.append(f"workload.name: {name} is not a Flower job; under flower use flower-mlp "
                            "(workloads/flower_train.py) or your own script (workload.command) that reads "
                            "FLOWER_ROLE and FLOWER_SERVER_ADDRESS")
        if name == "flower-mlp":
            per_round = int(w.args.get("clients_per_round", 2))  # type: ignore[union-attr]
            if per_round > c.nodes - 1:
                problems.append(f"workload.args.clients_per_round: {per_round} clients per round, but only "
                                f"{c.nodes - 1} client node(s) (nodes: {c.nodes}, node0 is the server); the server "
                                "would wait for clients that never come")
        return problems

    @classmethod
    def machine_checks(cls) -> list[Check]:
        version, why = flwr_version()
        if version is None:
            return [Check("flwr", False, f"not importable: {why}", 'pip install "torch-chaos[flower]"')]
        return [Check("flwr", True, f"flwr {version}", "")]

    def node_plans(self, ctx: LaunchContext) -> Launch:
        c, net = ctx.scenario.cluster, ctx.net
        port = net.store_port  # a free port the plan chose: the server's
        server = f"{net.addresses['node0']}:{port}"
        argv = node_argv(ctx.script, ctx.python)
        path = repo_pythonpath(ctx.base_env)
        nodes = []
        for i in range(c.nodes):
            name = f"node{i}"
            env = {**ctx.base_env, **net.env, "CHAOS_NODE": name, "PYTHONPATH": path,
                   "FLOWER_ROLE": "server" if i == 0 else "client", "FLOWER_SERVER_ADDRESS": server,
                   "RANK": str(i), "PYTHONUNBUFFERED": "1", "GRPC_VERBOSITY": "ERROR",
                   "FLWR_TELEMETRY_ENABLED": "0"}  # no usage report from nodes that reach nothing outside
            nodes.append(NodePlan(name, i, list(argv), env, cpus=ctx.pinned.get(name)))
        return Launch(nodes, store_port=port)

    def select_workers(self, tree: list[psutil.Process], node_pid: int) -> list[psutil.Process]:
        return []  # the node's process is the server or the client itself

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "packages": list(PACKAGES)}
