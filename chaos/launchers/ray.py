"""Ray Train as a launcher: node0 runs the Ray head (GCS) and the user's driver, every other node a Ray worker node.

Each node runs :mod:`chaos.launchers.ray_node`: ``ray start --block`` with the node's own address and a temp dir of
the run's (``/tmp/tchaos-ray-<run id's last 6>/<node>``: Ray's unix sockets must fit in 107 bytes), and on node0,
once every worker node joined, the workload's command as the driver with ``RAY_ADDRESS`` set. The orchestrator of
restarts is Ray Train (``FailureConfig.max_failures``): after a worker failure it starts a new worker group from the
checkpoint ``ray.train.get_checkpoint()`` hands it. A worker node the engine replaces (``cluster.node_restart``)
joins the running cluster again. The head holds the GCS and the driver: losing node0 ends the job, whatever the
restart policy says (Ray's GCS fault tolerance needs an external Redis, which this launcher does not start).

Measured here (2 cores, docs/ray.md): every Ray process of a node but its DashboardAgent and RuntimeEnvAgent
inherits the node's ``CHAOS_TREE`` and ``CHAOS_*`` environment (so the runtime's crash, freeze and teardown reach
them, and the probe in a Ray Train worker reaches the engine's channel); those two agents exit within 5 s of their
raylet. ``kill_worker`` acts on the ``ray::RayTrainWorker`` process (the actor that runs the training function).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psutil

from chaos.capabilities import KILL_WORKERS
from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.launchers.ray_node import RUN_ID_FILE
from chaos.machine import Check
from chaos.marks import marked_processes
from chaos.plan import REPO_ROOT, NodePlan, node_argv, repo_pythonpath
from chaos.registry import fault_plugins

if TYPE_CHECKING:
    from chaos.scenario import Scenario

TEMP_PREFIX = "/tmp/tchaos-ray-"
TRAIN_WORKER_TITLE = "ray::RayTrainWorker"  # the proctitle Ray gives the train worker actor's process
MIN_RAY = (2, 40)  # Ray Train V2 (ray.train.report(checkpoint_dir_name=...), get_context().get_storage())

# The probe's hang order names a rank by CHAOS_NODE and LOCAL_RANK; Ray Train numbers local ranks per node IP,
# and on the local runtime every node shares 127.0.0.1, so the order would name a rank that is not there.
_HANG = "Ray Train numbers LOCAL_RANK per node address, so the probe's order cannot name one rank on one node"


def temp_root(run_id: str) -> str:
    """The run's Ray temp dirs' parent: short (socket paths), and the run id's random tail keeps runs apart."""
    return f"{TEMP_PREFIX}{run_id[-6:]}"


def ray_version() -> tuple[str | None, str]:
    """(Ray's version, or None when it cannot be imported, why) from the interpreter nodes run."""
    try:
        out = subprocess.run([sys.executable, "-c", "import ray; print(ray.__version__)"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if out.returncode != 0:
        return None, (out.stderr.strip().splitlines() or ["import ray failed"])[-1]
    return out.stdout.strip(), ""


def kill_holders(root: Path) -> list[psutil.Process]:
    """SIGKILL the processes that hold a file open under ``root`` or work in it: Ray's DashboardAgent and
    RuntimeEnvAgent, which start without the node's mark (measured: their environment lacks ``CHAOS_TREE``) and,
    when the whole cluster is SIGKILLed at once, outlive their raylet for more than 10 s, re-parented to init.
    Their logs are open under the node's temp dir, which names them as the run's."""
    prefix = str(root) + os.sep
    holders = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            paths = [f.path for f in proc.open_files()] + [proc.cwd()]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if any(path.startswith(prefix) for path in paths):
            holders.append(proc)
    for proc in holders:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(holders, timeout=2)
    return holders


class Ray(Launcher):
    name = "ray"
    summary = "Ray Train on a Ray cluster the engine starts: node0 the head (GCS and driver), the others worker nodes"
    mode = "ray"
    orchestrator = "Ray Train (FailureConfig.max_failures restarts the worker group from the last committed " \
                   "checkpoint); worker nodes replaced by cluster.node_restart rejoin the cluster"
    runtimes = frozenset({"local", "netns", "docker"})
    single_point_of_failure = "node0 (the Ray head: the GCS and the driver; no GCS fault tolerance without Redis)"
    single_point_node = "node0"
    # Ray Train's controller commits a reported checkpoint at its next poll and rewrites this file then; a new
    # worker group resumes only from a committed one (docs/ray.md, "Ray resumes only from committed checkpoints")
    checkpoint_commit_file = "checkpoint_manager_snapshot.json"
    refused_faults: ClassVar[dict[str, str]] = {"hang": _HANG}
    # The settings that bound each of Ray's recovery phases (chaos.analysis.breakdown), by phase name; describe()
    # fills in the values in force (the engine's environment, which every node inherits, else Ray's defaults).
    levers: ClassVar[dict[str, str]] = {
        "detection": "a dead train worker: Ray Train's controller polls its workers every "
                     "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S ({RAY_TRAIN_HEALTH_CHECK_INTERVAL_S} s); a dead node: the "
                     "GCS's health checks, RAY_health_check_period_ms x RAY_health_check_failure_threshold "
                     "({RAY_health_check_period_ms} ms x {RAY_health_check_failure_threshold}, after "
                     "RAY_health_check_initial_delay_ms {RAY_health_check_initial_delay_ms} ms); a silent peer: "
                     "gloo's timeout (TorchConfig.timeout_s, the process-group timeout)",
        "worker-group restart": "FailureConfig(max_failures) allows the restart; Ray Train then starts a new worker "
                                "group (placement group, new actors, a new gloo group), bounded by "
                                "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S ({RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S} s); "
                                "its cost is the actors' start (imports) on the worker nodes",
        "checkpoint restore": "the training function's start, ray.train.get_checkpoint() (the checkpoint the "
                              "controller last committed) and reading it from storage_path: a smaller checkpoint, "
                              "faster storage",
        "first step": "the first step after the restart (warm-up)",
    }
    # Ray 2.60's defaults (ray._raylet.Config, ray.train.v2._internal.constants), for the values not set
    RAY_DEFAULTS: ClassVar[dict[str, str]] = {
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "2.0", "RAY_health_check_period_ms": "3000",
        "RAY_health_check_failure_threshold": "5", "RAY_health_check_initial_delay_ms": "5000",
        "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "60.0",
    }

    @classmethod
    def image_packages(cls) -> tuple[str, ...]:
        """Ray Train at the host's version, for container nodes (chaos.image builds it from the host's wheels), and
        psutil, which chaos.launchers.ray_node (each node's process) uses to stop what it started."""
        pins = []
        for name, extra, fallback in (("ray", "[train]", ">=2.40,<3"), ("psutil", "", "")):
            try:
                pins.append(f"{name}{extra}=={importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                pins.append(f"{name}{extra}{fallback}")
        return tuple(pins)

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        c = scenario.cluster
        problems = []
        if c.nodes < 2:
            problems.append("cluster.nodes: a Ray cluster here is node0 (the head, which trains nothing) and at "
                            "least one worker node: set nodes: 2 or more")
        w = scenario.workload
        if getattr(w, "name", None) == "ddp-mlp":
            problems.append("workload.name: ddp-mlp is started by torchrun or as one process; under Ray use "
                            "ray-mlp (workloads/ray_train.py) or your own Ray Train driver (workload.command)")
        for i, fault in enumerate(scenario.faults):
            if getattr(fault, "local_rank", None) is not None:
                problems.append(f"faults[{i}].local_rank: Ray Train sets LOCAL_RANK inside its worker after the "
                                "process started (it is not in the process's environment), so no worker can be "
                                "chosen by it; leave local_rank out (the node's Ray Train worker is chosen)")
            # kinds that act on a node's worker processes (select_workers): the head runs none
            if KILL_WORKERS in fault_plugins()[fault.kind].needs and fault.target in (0, "node0"):
                problems.append(f"faults[{i}].target: node0 is the Ray head and runs no Ray Train worker; target a "
                                "worker node (node1 ...)")
        return problems

    @classmethod
    def machine_checks(cls) -> list[Check]:
        version, why = ray_version()
        if version is None:
            return [Check("ray", False, f"not importable: {why}", 'pip install "torch-chaos[ray]"')]
        parts = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
        ok = parts >= MIN_RAY
        return [Check("ray", ok, f"ray {version}" + ("" if ok else f" (Ray Train V2 needs >= "
                                                                  f"{'.'.join(map(str, MIN_RAY))})"),
                      "" if ok else 'pip install -U "ray[train]"')]

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """The run's Ray temp dirs (session folders, sockets, logs): left behind when a node was SIGKILLed. A run
        whose processes still live keeps its dirs under ``only_orphans``."""
        removed = []
        parent, _, stem = TEMP_PREFIX.rpartition("/")
        for root in sorted(Path(parent).glob(stem + "*")):
            info = root.lstat()
            if root.is_symlink() or info.st_uid != os.getuid():  # not this user's: not ours to read or remove
                continue
            try:
                owner = (root / RUN_ID_FILE).read_text().strip()
            except OSError:
                owner = ""
            if run_id is not None and owner != run_id and root.name != Path(temp_root(run_id)).name:
                continue
            if only_orphans and owner and marked_processes(owner):
                continue
            removed += [f"Ray process {p.pid}" for p in kill_holders(root)]
            shutil.rmtree(root, ignore_errors=True)
            removed.append(f"Ray temp dir {root}")
        return removed

    def node_plans(self, ctx: LaunchContext) -> Launch:
        c, net = ctx.scenario.cluster, ctx.net
        root = temp_root(ctx.run_id)
        port = net.store_port  # a free port the plan chose: the GCS's
        head = f"{net.addresses['node0']}:{port}"
        code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from chaos.launchers.ray_node import main; "
                "sys.exit(main())")
        python = ctx.python
        driver = node_argv(ctx.script, python)
        path = repo_pythonpath(ctx.base_env)
        nodes = []
        for i in range(c.nodes):
            name = f"node{i}"
            common = ["--node-ip-address", net.addresses[name], "--temp-dir", f"{root}/{name}", "--run-id", ctx.run_id]
            if i == 0:
                argv = [python, "-c", code, "head", *common, "--port", str(port),
                        "--expect-workers", str(c.nodes - 1), "--", *driver]
            else:
                argv = [python, "-c", code, "worker", *common, "--address", head,
                        "--num-cpus", str(c.procs_per_node)]
            env = {**ctx.base_env, **net.env, "CHAOS_NODE": name, "PYTHONPATH": path,
                   "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
            nodes.append(NodePlan(name, i, argv, env, cpus=ctx.pinned.get(name)))
        return Launch(nodes, store_port=port)

    def select_workers(self, tree: list[psutil.Process], node_pid: int) -> list[psutil.Process]:
        chosen = []
        for proc in tree:
            try:
                if " ".join(proc.cmdline()).startswith(TRAIN_WORKER_TITLE):
                    chosen.append(proc)
            except Exception:  # gone, or not ours to read: not a worker to kill
                continue
        return chosen

    @classmethod
    def levers_in_force(cls, env: dict[str, str] | None = None) -> dict[str, str]:
        """:attr:`levers` with the values this run's nodes get: set in the engine's environment (inherited by
        every node's ``ray start``), else Ray's defaults."""
        env = dict(os.environ if env is None else env)
        values = {k: env.get(k, default) for k, default in cls.RAY_DEFAULTS.items()}
        return {phase: text.format(**values) for phase, text in cls.levers.items()}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "levers": self.levers_in_force(),
                "ray_temp_dirs": f"{TEMP_PREFIX}<run id's last 6>/<node>"}
