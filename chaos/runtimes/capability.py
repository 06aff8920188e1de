"""The runtime interface split by what asks for it: one protocol per capability group, and which protocol backs
each capability name a runtime declares (``Runtime.capabilities``, the names of :mod:`chaos.capabilities`).

Why: ``Runtime`` is one class of ~30 members, most of them optional (they raise ``Unsupported`` by default). A
fault kind uses a handful of them, named by its ``needs``; a runtime author needs to know which members a declared
capability commits them to. These protocols are that contract: a fault module types its runtime against the
protocol it uses, and ``tests/test_runtime_capabilities.py`` checks that every registered runtime that declares a
capability overrides the members that back it (a declared capability left on the base's ``Unsupported`` default
would pass validation and fail every injection).

Standard library only, like :mod:`chaos.capabilities`: fault kinds, runtimes and the scenario model import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chaos.capabilities import CPU_QUOTA, FREEZE, HOST_LOSS, KILL, KILL_WORKERS, MEMORY_CGROUP, NODE_NETWORK

if TYPE_CHECKING:
    from chaos.plan import Plan


class NodeLifecycle(Protocol):
    """What the engine itself asks of every runtime: start nodes, see them exit, remove everything at the end."""

    run_id: str

    def start_node(self, node: Any) -> None: ...
    def exit_code(self, name: str) -> int | None: ...
    def teardown(self) -> list[str]: ...
    def log_path(self, name: str) -> Path: ...


class ProcessControl(Protocol):
    """The process faults (crash, kill_worker, native_crash, hang, freeze, lost_writes)."""

    run_id: str

    def kill(self, name: str) -> str: ...
    def kill_workers(self, name: str, sig: int = 9, local_rank: int | None = None) -> str: ...
    def freeze(self, name: str) -> str: ...
    def thaw(self, name: str) -> None: ...
    def log_path(self, name: str) -> Path: ...


class NetworkControl(Protocol):
    """The network faults (delay, loss, bandwidth, partition, isolate): host tools run inside a node's namespace."""

    def net_enter(self, name: str) -> list[str]: ...
    def interface(self, name: str) -> str: ...
    def net_where(self, name: str) -> str: ...
    def net_by(self) -> str | None: ...
    def net_address(self, plan: Plan, name: str) -> str: ...


class ResourceControl(Protocol):
    """The memory and CPU faults (oom_kill, memory_pressure, straggler): a node's host processes, its memory
    cgroup, or a CPU quota of its own."""

    run_id: str

    def node_pids(self, name: str) -> list[int]: ...
    def memory_cgroup(self, name: str) -> Path: ...
    def cpu_quota(self, name: str) -> tuple[int, int]: ...
    def set_cpu_quota(self, name: str, quota_us: int, period_us: int) -> str: ...
    def log_path(self, name: str) -> Path: ...


class HostControl(Protocol):
    """host_loss: a node's whole host lost at once, and returned."""

    def lose_host(self, name: str) -> tuple[str, dict[str, Any]]: ...
    def return_host(self, host: str) -> dict[str, Any]: ...
    def can_replace(self, name: str) -> str | None: ...


# Which members a runtime that declares a capability must implement itself (not inherit the base's Unsupported):
# any one of the alternatives. CPU_QUOTA is a quota of the node's own (a container's) or host processes the fault
# puts in a cpu cgroup; the capabilities not listed are backed by the lifecycle (storage, rendezvous servers).
_P, _N, _R, _H = ProcessControl, NetworkControl, ResourceControl, HostControl
BACKING: dict[str, tuple[type, tuple[tuple[str, ...], ...]]] = {
    KILL: (_P, ((_P.kill.__name__,),)),
    KILL_WORKERS: (_P, ((_P.kill_workers.__name__,),)),
    FREEZE: (_P, ((_P.freeze.__name__, _P.thaw.__name__),)),
    NODE_NETWORK: (_N, ((_N.net_enter.__name__,),)),
    MEMORY_CGROUP: (_R, ((_R.memory_cgroup.__name__, _R.node_pids.__name__),)),
    CPU_QUOTA: (_R, ((_R.cpu_quota.__name__, _R.set_cpu_quota.__name__), (_R.node_pids.__name__,))),
    HOST_LOSS: (_H, ((_H.lose_host.__name__, _H.return_host.__name__),)),
}


def unbacked(runtime: type, base: type) -> list[str]:
    """The capabilities ``runtime`` declares (always or conditionally) whose members it leaves on ``base``'s
    defaults, each as ``capability: members``; empty when every declared capability is backed by its own code."""
    problems = []
    declared = set(getattr(runtime, "capabilities", ())) | set(getattr(runtime, "conditional_capabilities", ()))
    for capability in sorted(declared & BACKING.keys()):
        _, alternatives = BACKING[capability]
        if not any(all(getattr(runtime, m) is not getattr(base, m) for m in group) for group in alternatives):
            problems.append(f"{capability}: {' or '.join('/'.join(group) for group in alternatives)}")
    return problems
