"""What a rendezvous-backend plug-in is (entry point group ``torch_chaos.rendezvous``).

A backend turns the resolved elastic settings into torchrun's ``--rdzv-*`` arguments for one node, and says
what the machine needs for it. Where the store or its servers live (node 0 or a dedicated endpoint) is decided
by the plan; a backend that needs servers of its own (etcd) returns them from :meth:`RendezvousBackend.servers`,
and the runtime starts them before the nodes, as it starts a dedicated store. See docs/design.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.registry import RENDEZVOUS, register_base

if TYPE_CHECKING:
    from chaos.machine import Check
    from chaos.plan import NodePlan


class RendezvousBackend(ABC):
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # Runtime capabilities the backend needs (chaos.capabilities.CAPABILITIES): servers of its own need
    # RENDEZVOUS_SERVERS. Validation refuses a runtime that lacks one, naming the runtimes that have it.
    needs: ClassVar[frozenset[str]] = frozenset()
    # Whether torchrun's c10d store (rendezvous.store: node0 | dedicated) is what it rendezvous through.
    uses_c10d_store: ClassVar[bool] = True
    # The servers it runs (rendezvous.members) and their names: ``<server_prefix><i>`` (fault targets).
    server_prefix: ClassVar[str | None] = None
    default_members: ClassVar[int] = 0

    @abstractmethod
    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        """The ``--rdzv-*`` arguments of one node's torchrun command line."""

    @classmethod
    def machine_checks(cls) -> list[Check]:
        return []

    def servers(self, *, run_id: str, run_dir: Path, members: int,
                addresses: Mapping[str, str] | None = None) -> list[NodePlan]:
        """The server processes this backend needs, started before the nodes; ``addresses``: where each server
        name (``<server_prefix><i>``) listens (the shared loopback on local, its own address on netns and
        docker; a name missing from it listens on loopback)."""
        return []

    def endpoint(self, servers: list[NodePlan]) -> str:
        """The ``--rdzv-endpoint`` of a backend with servers of its own."""
        raise NotImplementedError


def _check_backend(name: str, cls: type[RendezvousBackend]) -> str | None:
    if getattr(cls, "name", None) != name:
        return f"not a chaos.plugin.RendezvousBackend subclass named {name!r}"
    return None


register_base(RENDEZVOUS, RendezvousBackend, _check_backend)
