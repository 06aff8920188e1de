"""Fault kinds: one module each, found by their ``kind``; adding a fault kind means adding a file here."""

from __future__ import annotations

import importlib
import pkgutil

from chaos.faults.base import FaultContext, FaultKind

_REGISTRY: dict[str, type[FaultKind]] = {}


def _load() -> dict[str, type[FaultKind]]:
    if not _REGISTRY:
        for info in pkgutil.iter_modules(__path__):
            if info.name != "base":
                importlib.import_module(f"{__name__}.{info.name}")
        pending = list(FaultKind.__subclasses__())
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            if getattr(cls, "kind", ""):
                _REGISTRY[cls.kind] = cls
    return _REGISTRY


def fault_kind(kind: str) -> FaultKind:
    try:
        return _load()[kind]()
    except KeyError:
        raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(_load()))}") from None


__all__ = ["FaultContext", "FaultKind", "fault_kind"]
