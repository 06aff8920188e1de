"""Everything a plug-in author imports: ``from chaos.plugin import FaultKind, FaultSpec, ...``.

A fault kind is a :class:`FaultKind` subclass with an options model (a :class:`FaultSpec` subclass declaring
``kind: Literal["name"]``), registered under the entry point group ``torch_chaos.faults``; a runtime is a
:class:`Runtime` subclass under ``torch_chaos.runtimes``; a rendezvous backend a :class:`RendezvousBackend`
under ``torch_chaos.rendezvous``. This module stays import-light (no torch, no docker SDK) because the registry
loads plug-ins while the scenario schema is being built. The worked example is examples/torch-chaos-wipe-checkpoints;
the interface is described in docs/design.md, "Extension points".
"""

from __future__ import annotations

from chaos.faults.base import FaultContext, FaultKind
from chaos.machine import Check
from chaos.plan import Addressing, NodePlan, Plan
from chaos.rendezvous.base import RendezvousBackend
from chaos.runtimes.base import (
    CAPABILITIES,
    CHECKPOINT_STORAGE,
    FREEZE,
    HOST_LOSS,
    KILL,
    KILL_WORKERS,
    NODE_NETWORK,
    RENDEZVOUS_SERVERS,
    STORAGE_LAYER,
    Runtime,
    Unsupported,
)
from chaos.spec import EventTrigger, FaultSpec, Seconds, Strict

__all__ = [
    "CAPABILITIES", "CHECKPOINT_STORAGE", "FREEZE", "HOST_LOSS", "KILL", "KILL_WORKERS", "NODE_NETWORK",
    "RENDEZVOUS_SERVERS", "STORAGE_LAYER",
    "Addressing", "Check",
    "EventTrigger", "FaultContext", "FaultKind", "FaultSpec", "NodePlan", "Plan", "RendezvousBackend", "Runtime",
    "Seconds", "Strict", "Unsupported",
]
