"""What a rendezvous-backend plug-in is (entry point group ``torch_chaos.rendezvous``).

A backend turns the resolved elastic settings into torchrun's ``--rdzv-*`` arguments for one node, and says
what the machine needs for it. Where the store or its servers live (node 0 or a dedicated endpoint) is decided
by the plan; a backend that needs servers of its own (etcd) will add them here. See docs/design.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from chaos.machine import Check


class RendezvousBackend(ABC):
    name: ClassVar[str]
    summary: ClassVar[str] = ""

    @abstractmethod
    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        """The ``--rdzv-*`` arguments of one node's torchrun command line."""

    @classmethod
    def machine_checks(cls) -> list[Check]:
        return []
