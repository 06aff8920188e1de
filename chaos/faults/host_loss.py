"""Host loss: the machine a node runs on is gone at once (power, a kernel panic, a dead NIC), with the scheduler's
own view of it: nobody tells Slurm, which must notice the silence itself.

Unlike ``crash`` (the node's processes are killed, the host stays), every process of the host dies, its network
goes with it, and the node's job step ends only when the scheduler marks the host down. That takes root on the host
or on what runs it, which a user on a real cluster has not: the runtime asks whoever has it (the slurm runtime:
the container cluster's agent, :mod:`chaos.cluster.agent`) and the run is refused where nobody does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chaos.capabilities import HOST_LOSS
from chaos.faults.base import FaultContext, FaultKind
from chaos.spec import FaultSpec, Seconds


class HostLossOptions(FaultSpec):
    kind: Literal["host_loss"]
    return_after: Seconds | None = Field(None, description="bring the host back this many seconds after it was "
                                         "lost (it rejoins the cluster, not the run's allocation); default: at the "
                                         "run's end")


class HostLoss(FaultKind):
    kind = "host_loss"
    options = HostLossOptions
    summary = "the node's whole host is lost at once (docker kill of its container by the cluster's agent)"
    needs = frozenset({HOST_LOSS})
    colour = "#8c564b"
    # The host stays lost until return_after or the run's end, when it is given back: the cluster as it was found.
    lasts_until_healed = True

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        mechanism, facts = ctx.runtime.lose_host(ctx.node)
        ctx.details.update(facts)
        ctx.handles.append(facts["host"])
        return mechanism

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        if not ctx.handles:
            return None
        return ctx.runtime.return_host(ctx.handles[0])

    @classmethod
    def heal_after(cls, spec: Any) -> float | None:
        return spec.return_after  # type: ignore[no-any-return]

    @classmethod
    def describe(cls, spec: Any) -> str:
        return (f"host back after {spec.return_after:g}s" if spec.return_after is not None
                else "host back at the run's end")
