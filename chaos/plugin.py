"""Everything a plug-in author imports: ``from chaos.plugin import FaultKind, FaultSpec, ...``.

A fault kind is a :class:`FaultKind` subclass with an options model (a :class:`FaultSpec` subclass declaring
``kind: Literal["name"]``), registered under the entry point group ``torch_chaos.faults``; a runtime is a
:class:`Runtime` subclass under ``torch_chaos.runtimes``; a rendezvous backend a :class:`RendezvousBackend`
under ``torch_chaos.rendezvous``. This module stays import-light (no torch, no docker SDK) because the registry
loads plug-ins while the scenario schema is being built. The worked example is examples/torch-chaos-wipe-checkpoints;
the interface is described in docs/design.md, "Extension points".
"""

from __future__ import annotations

from chaos.capabilities import (
    CAPABILITIES,
    CHECKPOINT_STORAGE,
    CPU_QUOTA,
    FREEZE,
    HOST_LOSS,
    KILL,
    KILL_WORKERS,
    MEMORY_CGROUP,
    NODE_NETWORK,
    RENDEZVOUS_SERVERS,
    STORAGE_LAYER,
)
from chaos.faults.base import FaultContext, FaultKind, draw_duration, local_rank_problems
from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.machine import Check
from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark, marked_processes, signal_all
from chaos.plan import Addressing, NodePlan, Plan
from chaos.rendezvous.base import RendezvousBackend
from chaos.runtimes.base import Runtime, Unsupported
from chaos.spec import EventTrigger, FaultSpec, PositiveSeconds, Seconds, Strict

# The process marks (chaos.marks): a runtime whose nodes run on this host marks every tree it starts with TREE_VAR
# and ENGINE_VAR, as the local runtime does, so its kill and teardown find the whole tree (torchrun starts its
# workers in sessions of their own: a process-group kill leaves them training) and `chaos cleanup` finds what a
# killed engine left behind.

__all__ = [
    "CAPABILITIES",
    "CHECKPOINT_STORAGE",
    "CPU_QUOTA",
    "ENGINE_VAR",
    "FREEZE",
    "HOST_LOSS",
    "KILL",
    "KILL_WORKERS",
    "MEMORY_CGROUP",
    "NODE_NETWORK",
    "RENDEZVOUS_SERVERS",
    "STORAGE_LAYER",
    "TREE_VAR",
    "Addressing",
    "Check",
    "EventTrigger",
    "FaultContext",
    "FaultKind",
    "FaultSpec",
    "Launch",
    "LaunchContext",
    "Launcher",
    "NodePlan",
    "Plan",
    "PositiveSeconds",
    "RendezvousBackend",
    "Runtime",
    "Seconds",
    "Strict",
    "Unsupported",
    "draw_duration",
    "engine_mark",
    "local_rank_problems",
    "marked_processes",
    "signal_all",
]
