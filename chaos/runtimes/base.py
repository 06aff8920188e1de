"""The one interface every runtime implements, in the spirit of TorchX's scheduler API.

Faults are written against this interface only, so a new runtime gets every fault it can support. A runtime
knows nothing of metrics, reports or the CLI; it starts and hurts nodes, and it removes everything it created.
It is also a plug-in (entry point group ``torch_chaos.runtimes``): the class declares its name, its
capabilities (what faults may ask of it), its scenario options (``cluster.<name>: {...}``), what ``chaos doctor``
checks for it and what ``chaos cleanup`` removes. See docs/design.md, "Extension points".

Import-light on purpose: the registry imports runtime modules while the scenario model is being built, so
nothing here may import :mod:`chaos.scenario` at run time.
"""

from __future__ import annotations

import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from chaos.channel import listen
from chaos.events import NODE_BANNER
from chaos.machine import Check
from chaos.plan import Addressing, NodePlan, Plan
from chaos.registry import RUNTIMES, fault_plugins, register_base

if TYPE_CHECKING:
    from pydantic import BaseModel

    from chaos.scenario import Scenario

class Unsupported(RuntimeError):
    """This runtime cannot do what a fault asked (the engine records it instead of pretending)."""


class Runtime(ABC):
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # Capabilities the runtime has only on some machines (the slurm runtime's host_loss: where a cluster agent
    # gives it). A scenario needing one validates anywhere (a plan can be reviewed off the cluster); the run asks
    # :meth:`capability_check` on the machine it runs on and stops before creating anything when it fails.
    conditional_capabilities: ClassVar[frozenset[str]] = frozenset()
    # The runtime's own scenario options, written as ``cluster.<name>: {...}`` (None: it takes none).
    options: ClassVar[type[BaseModel] | None] = None
    # Order in ``chaos cleanup`` (lower first): containers go before the processes inside them carry marks.
    cleanup_order: ClassVar[int] = 50
    # Whether the fault-free reference (chaos/golden.py) may run as local processes beside the engine. True where
    # the engine's machine is the nodes' kind of machine; a scheduler's login node is not (no GPUs, shared by
    # everyone), so on a runtime that says False the golden run is a run on the cluster itself (checks.golden:
    # true means cluster there; beside is refused and matches_golden says why).
    golden_beside_engine: ClassVar[bool] = True
    # Whether a FUSE mount on the engine's host can serve the nodes' checkpoint directory: true where the nodes'
    # file operations go through that host's kernel (processes, namespaces, containers with a bind mount). A
    # scheduler's nodes write the shared filesystem from their own hosts, past any mount on the login node: there
    # the storage layer can only watch (inotify), and only where the hosts share one kernel (docs/design.md).
    fuse_on_engine_host: ClassVar[bool] = True
    # Whether the runtime runs the storage layer on each node's own host instead (the node's command wrapped in
    # ``python -m chaos.storage host``, its events and rules over the history channel: chaos/storage/hostlayer.py).
    # Such a runtime checks FUSE on the hosts it gets and uses ``storage_layer.node_command`` at every node start.
    fuse_on_node_hosts: ClassVar[bool] = False
    # Whether network faults run the host tools (nsenter, iptables, tc) on the engine's machine, as root there: the
    # slurm runtime's go through the container cluster's agent instead, so the engine's machine needs none of them.
    net_tools_on_engine: ClassVar[bool] = True

    @classmethod
    def create(cls, scenario: Scenario, run_id: str, run_dir: str | Path) -> Runtime:
        """The runtime for one run of ``scenario`` (its options are ``scenario.cluster.<name>``)."""
        return cls(run_id, run_dir)

    @classmethod
    def machine_checks(cls, options: Any = None) -> list[Check]:
        """What this machine must have to run nodes here (``chaos doctor``; a failing one stops a run)."""
        return []

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """Remove what runs on this runtime left behind (``chaos cleanup``); idempotent."""
        return []

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        """What this runtime cannot accept in a scenario that each section alone accepts (``field: why`` lines,
        reported by ``chaos validate`` with the field's line); none by default."""
        return []

    @classmethod
    def capability_check(cls, capability: str, options: Any = None) -> Check:
        """Whether this machine gives one of :attr:`conditional_capabilities` (a required check of the run)."""
        return Check(f"{cls.name}: {capability}", False, f"the {cls.name} runtime cannot tell whether it has it", "")

    def __init__(self, run_id: str, run_dir: str | Path):
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        # The engine's StorageLayer when it runs on the nodes' hosts (fuse_on_node_hosts), else None.
        self.storage_layer: Any = None
        # The run's launcher (chaos.launchers), set by the engine: which processes of a node are its workers.
        self.launcher: Any = None

    def agent_words(self) -> str:
        """What stays when only a node's workers are signalled, for the fault's mechanism: torchrun's agent, or the
        process of whichever launcher runs the node."""
        name = getattr(self.launcher, "name", "torchrun")
        # process's workers have an agent only under torchrun --standalone
        return "the torchrun agent stays" if name in ("torchrun", "process") else f"the node's {name} launcher stays"

    def select_workers(self, tree: list[Any], node_pid: int) -> list[Any]:
        """A node's worker processes among ``tree`` (psutil processes; ``node_pid`` the node's main process), as
        the run's launcher says: torchrun's workers by default, a Ray Train worker actor under Ray."""
        if self.launcher is None:
            return [p for p in tree if p.pid != node_pid]
        return list(self.launcher.select_workers(tree, node_pid))

    @abstractmethod
    def start_node(self, node: NodePlan) -> None:
        """Start (or restart under the same name) one node's process tree, logging to ``logs/<name>.log``."""

    @abstractmethod
    def exit_code(self, name: str) -> int | None:
        """None while the node's main process runs; its exit code (negative = killed by signal) after."""

    @abstractmethod
    def kill(self, name: str) -> str:
        """SIGKILL the node's whole tree; returns the mechanism used (recorded in the history)."""

    @abstractmethod
    def kill_workers(self, name: str, sig: int = 9, local_rank: int | None = None) -> str:
        """Signal (SIGKILL by default) the node's worker processes only, leaving its launcher (agent) alive;
        ``local_rank`` picks one worker (its ``LOCAL_RANK``) instead of all. A SIGSEGV or SIGABRT is how a native
        crash looks to the launcher (exit code -11 / -6), which is not what a SIGKILL (-9, the OOM killer) says."""

    @abstractmethod
    def freeze(self, name: str) -> str:
        """Stop every process of the node until :meth:`thaw`."""

    @abstractmethod
    def thaw(self, name: str) -> None: ...

    def effect_time(self, name: str) -> float | None:
        """When the fault just injected on ``name`` took effect (``time.time()``), for a runtime whose fault methods
        go on checking after the signal (the slurm runtime's helper step: ~0.3-1 s): the fault's time, from which
        recovery and a freeze's duration count. None (the default): when the method returned. Read once per fault."""
        return None

    @abstractmethod
    def teardown(self) -> list[str]:
        """Kill and remove everything this runtime created for the run; returns what it had to clean up."""

    def lose_host(self, name: str) -> tuple[str, dict[str, Any]]:
        """Lose the host ``name`` runs on, all at once (a machine gone from the network); returns the mechanism
        and the facts the history records beside it (the host, when it was done)."""
        raise Unsupported(f"the {self.name} runtime cannot lose a host")

    def return_host(self, host: str) -> dict[str, Any]:
        """Bring a host lost by :meth:`lose_host` back (it joins no job by itself); facts for ``fault_healed``."""
        raise Unsupported(f"the {self.name} runtime cannot return a host")

    def can_replace(self, name: str) -> str | None:
        """Why the node cannot be replaced now (its host is lost and no spare is left), or None: asked by the
        orchestrator before it replaces a failed node under ``node_restart: on-failure``."""
        return None

    def node_pids(self, name: str) -> list[int]:
        """Host pids of every process of the node (memory faults: which processes a memory limit must cover)."""
        raise Unsupported(f"the {self.name} runtime does not expose its nodes' processes to the host")

    def memory_cgroup(self, name: str) -> Path:
        """The node's own memory cgroup directory, holding every page the node charged (memory faults)."""
        raise Unsupported(f"the {self.name} runtime gives nodes no memory cgroup of their own")

    def cpu_quota(self, name: str) -> tuple[int, int]:
        """The node's own CPU quota as the runtime records it: (quota µs per period, period µs), 0 = not set
        (straggler). Unsupported: the node has none of its own, and its processes (:meth:`node_pids`) are host
        processes the fault puts in a cpu cgroup itself."""
        raise Unsupported(f"the {self.name} runtime keeps no CPU quota of its own per node")

    def set_cpu_quota(self, name: str, quota_us: int, period_us: int) -> str:
        """Set the node's own CPU quota (``quota_us`` ≤ 0: none); returns the mechanism used."""
        raise Unsupported(f"the {self.name} runtime keeps no CPU quota of its own per node")

    def addressing(self, scenario: Scenario) -> Addressing:
        """Where each node will listen; asked before the plan is built, so the plan shows real addresses."""
        return Addressing.loopback(scenario)

    def channel_socket(self, host: str, port: int) -> socket.socket:
        """The history channel's listening socket on ``host:port`` (the plan's ``channel``, from
        :meth:`addressing`), made after :meth:`prepare`: a runtime whose nodes live on a network of their own
        makes it where that network's host side is, never on every interface of the machine."""

        return listen(host, port)

    def prepare(self, plan: Plan) -> None:
        """Create what nodes need before the first one starts (networks, namespaces); teardown removes it."""
        return None

    def net_enter(self, name: str) -> list[str]:
        """The command prefix that runs a host tool inside the node's network namespace (for network faults)."""
        raise Unsupported(f"the {self.name} runtime gives nodes no network of their own; "
                          "network faults need cluster.runtime: netns or docker")

    def interface(self, name: str) -> str:
        """The node's interface towards the other nodes, inside its namespace."""
        return "eth0"

    def net_where(self, name: str) -> str:
        """How a fault's mechanism names the network namespace of node ``name`` (a scheduler's adds the host)."""
        return name

    def net_by(self) -> str | None:
        """Who runs the host tools in the nodes' namespaces when it is not the engine itself (said in the
        mechanism): None here, the engine does."""
        return None

    def net_address(self, plan: Plan, name: str) -> str:
        """The node's address on the nodes' network as its peers' packets carry it (what a DROP rule matches). The
        plan's, where the plan holds real addresses; a scheduler's runtime knows its hosts only once allocated."""
        return plan.addresses[name]

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.name}

    def observe(self) -> list[dict[str, Any]]:
        """What the runtime saw its own machinery do since the last call (a scheduler's allocation, its view of a
        host), each dict one history event ``{"event": Ev..., **fields}``; asked every engine tick, so cheap and
        never blocking. Most runtimes see nothing the nodes do not report themselves."""
        return []

    def dry_run_commands(self, plan: Plan) -> list[str]:
        """The command lines a run would execute to place its nodes, for ``chaos run --dry-run`` (a scheduler's
        ``salloc``/``srun``); empty when the plan's argv is all there is."""
        return []

    def log_path(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"


class NodeLogs:
    """Each node's open log file (``logs/<name>.log``) for runtimes that start node processes from the engine: a
    restart appends under a banner line to the same file, and the previous handle is closed first."""

    def __init__(self, log_path: Callable[[str], Path]):
        self._path = log_path
        self._open: dict[str, IO[bytes]] = {}

    def reopen(self, name: str, where: str = "") -> IO[bytes]:
        """The log of ``name``'s new start (``where``: the host, when it is not this one), banner written."""
        log = self._path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        if name in self._open:
            self._open.pop(name).close()
        fh = open(log, "ab")
        fh.write(f"\n{NODE_BANNER}{name}{f' on {where}' if where else ''} at {time.time():.3f}\n"
                 .encode())
        fh.flush()
        self._open[name] = fh
        return fh

    def close(self) -> None:
        for fh in self._open.values():
            fh.close()
        self._open.clear()


def plan_needs(plan: Plan, capability: str) -> bool:
    """Whether a fault of the plan's scenario needs ``capability`` (a runtime sets it up only then)."""
    plugins = fault_plugins()
    return any(capability in getattr(plugins.get(f.kind), "needs", ()) for f in plan.scenario.faults)


def _check_runtime(name: str, cls: type[Runtime]) -> str | None:
    return None if getattr(cls, "name", None) == name else f"not a chaos.plugin.Runtime subclass named {name!r}"


register_base(RUNTIMES, Runtime, _check_runtime)
