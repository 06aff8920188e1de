"""Memory pressure: a co-located process allocates ``size`` of memory inside the node for ``duration``.

What a job meets when something else on its machine or in its container grows: a data loader's cache, a second
job, a leaking sidecar. The allocator runs in the node's own memory cgroup and touches every page it allocates.
Without ``limit`` it competes for the machine's memory only (refused beyond half of what the machine has
available: this must never take the machine down); with ``limit`` the node's cgroup is capped for the duration, and
once the node and the allocator together pass it the kernel reclaims and then OOM-kills the cgroup's process with
the largest footprint, which may be a worker or the allocator itself: which one is measured, not assumed (each kill
is an ``oom_killed`` event with its role; the allocator's exit code is in ``fault_healed``).
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import psutil
from pydantic import Field, model_validator

from chaos.capabilities import MEMORY_CGROUP
from chaos.cgroup import MiB, NodeMemory
from chaos.cgroup import cleanup as memory_cleanup
from chaos.cgroup import machine_checks as memory_checks
from chaos.faults.base import FaultContext, FaultKind, draw_duration
from chaos.faults.membase import OomWatch, start_allocator, stop_allocator
from chaos.faults.storagebase import Bytes, PositiveBytes
from chaos.spec import FaultSpec, Strict

if TYPE_CHECKING:
    from chaos.machine import Check

# An allocation without a node limit may take at most this share of the machine's available memory.
MAX_SHARE = 0.5


class MemoryPressureOptions(FaultSpec):
    DURATION: ClassVar = "required"
    EXAMPLES: ClassVar = {"size": "size: 512MB"}
    kind: Literal["memory_pressure"]
    size: PositiveBytes = Field(description="memory the co-located allocator takes and holds (e.g. 512MB)")
    limit: Bytes | None = Field(None, description="cap the node's memory cgroup at this for the duration (e.g. 2GB); "
                                "default: no cap (the allocator competes for the machine's memory)")
    headroom: Bytes | None = Field(None, description="instead of limit: cap the node at what it holds at the "
                                   "injection plus this (e.g. 128MB), whatever the job's footprint")

    @model_validator(mode="after")
    def _one_cap(self) -> MemoryPressureOptions:
        if self.limit is not None and self.headroom is not None:
            raise ValueError("give limit or headroom, not both")
        return self


class MemoryPressureExplore(Strict):
    """``explore.memory_pressure``: the allocations ``chaos explore`` may generate (durations from
    explore.durations)."""

    sizes: tuple[PositiveBytes, PositiveBytes] = Field(
        (128 * MiB, 512 * MiB), description="the allocator's size is drawn from this range (whole MiB)")
    headrooms: list[Bytes] = Field(default_factory=list, description="caps at the node's footprint plus one of "
                                   "these that may be drawn (e.g. [64MB]); the uncapped allocation is always a choice")

    @model_validator(mode="after")
    def _check(self) -> MemoryPressureExplore:
        low, high = self.sizes
        if low > high or -(-low // MiB) > high // MiB:
            raise ValueError(f"sizes: expected [low, high] with a whole MiB between them, got [{low}, {high}]")
        return self


def _mib(n: int | None) -> str:
    return "none" if n is None else f"{n / MiB:.0f} MiB"


class MemoryPressure(FaultKind):
    kind = "memory_pressure"
    options = MemoryPressureOptions
    summary = "a co-located allocator takes `size` of memory in the node (under an optional node `limit`)"
    needs = frozenset({MEMORY_CGROUP})
    explore_options = MemoryPressureExplore
    colour = "#17becf"

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.spec.size is not None and ctx.spec.duration is not None
        spec: MemoryPressureOptions = ctx.spec
        run_id = ctx.runtime.run_id
        capped = spec.limit is not None or spec.headroom is not None
        if not capped and spec.size > MAX_SHARE * psutil.virtual_memory().available:
            raise RuntimeError(f"size {_mib(spec.size)} is more than half of the machine's available memory "
                               f"({_mib(psutil.virtual_memory().available)}): give the node a limit, or a smaller size")
        mem = NodeMemory.of(ctx.runtime, ctx.node, ctx.fault_id)
        before, usage = mem.limit(), mem.usage()
        watch = OomWatch(mem, ctx.runtime)
        ctx.handles.append(watch)
        limit = spec.limit if spec.headroom is None else usage + spec.headroom
        if limit is not None:
            try:
                mem.set_limit(limit, run_id)
            except BaseException:
                watch.klog.close()
                raise
            watch.limit = limit
        try:
            allocator = start_allocator(mem.path, spec.size, spec.duration + 5, False, run_id, ctx.fault_id,
                                        ctx.runtime.log_path(f"{ctx.node}-memory_pressure-{ctx.fault_id}"))
        except BaseException:
            watch.klog.close()
            if limit is not None:
                mem.restore()
            raise
        watch.allocator = allocator.pid
        ctx.handles.append(allocator)
        ctx.details.update({"cgroup": str(mem.path), "cgroup_version": mem.lay.version, "usage_bytes": usage,
                            "size_bytes": spec.size, "limit_bytes": limit, "previous_limit_bytes": before,
                            "allocator_pid": allocator.pid})
        cap = (f" under a node limit of {_mib(limit)} (was {_mib(before)})" if limit is not None
               else " (no node limit)")
        return (f"a co-located allocator (pid {allocator.pid}) takes {_mib(spec.size)} in {ctx.node}'s cgroup "
                f"v{mem.lay.version}{cap}; node usage was {_mib(usage)}")

    def observe(self, ctx: FaultContext) -> list[dict[str, Any]]:
        watch = next((h for h in ctx.handles if isinstance(h, OomWatch)), None)
        return watch.poll(ctx.fault_id, self.kind, final=ctx.closing) if watch is not None else []

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        watch = next(h for h in ctx.handles if isinstance(h, OomWatch))
        allocator = next((h for h in ctx.handles if isinstance(h, subprocess.Popen)), None)
        peak = watch.mem.usage() if watch.mem.path.is_dir() else None
        ended = allocator.poll() if allocator is not None else None
        stop_allocator(allocator)
        watch.klog.close()
        # Its exit code before the heal: -9 if the OOM killer took it; null if it held its memory to the end.
        out: dict[str, Any] = {"allocator_exit": ended, "node_usage_at_heal_bytes": peak}
        if watch.mem.before:
            out.update(watch.mem.restore())
        else:
            out["restored"] = True  # nothing on the node was changed but the allocator, and it is gone
        return out

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        return memory_cleanup(run_id, only_orphans)

    @classmethod
    def machine_checks(cls) -> list[Check]:
        return memory_checks()

    @classmethod
    def describe(cls, spec: Any) -> str:
        return (f"{_mib(spec.size)} for {spec.duration:g}s"
                + (f" under a {_mib(spec.limit)} limit" if spec.limit is not None else "")
                + (f" with {_mib(spec.headroom)} of headroom" if spec.headroom is not None else ""))

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        section = cls.explore_bounds(bounds)
        low, high = section.sizes
        out: dict[str, Any] = {"size": draw(st.integers(-(-low // MiB), max(-(-low // MiB), high // MiB))) * MiB,
                               "duration": draw_duration(draw, bounds)}
        headroom = draw(st.sampled_from([None, *section.headrooms]))
        if headroom is not None:
            out["headroom"] = headroom
        return out
