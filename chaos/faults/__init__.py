"""Fault kinds: one module each, registered as entry points (group ``torch_chaos.faults``) like any plug-in."""

from __future__ import annotations

from chaos.faults.base import FaultContext, FaultKind
from chaos.registry import fault_kind

__all__ = ["FaultContext", "FaultKind", "fault_kind"]
