"""OOM kill: the node's memory cgroup gets a limit the node cannot live under, and the kernel's OOM killer acts.

What a job meets when a worker outgrows its container or its Slurm/Kubernetes memory limit: the kernel kills the
largest process of the cgroup with SIGKILL, and all the launcher says is ``exitcode: -9``, exactly what a
``kill_worker`` says. This kind makes the kernel do the killing, so the history holds the kernel's own record of
it (an ``oom_killed`` event per kill: the cgroup's ``oom_kill`` counter and the kernel's "Killed process N" line)
and the report can say "OOM-killed" where a crash says "killed".

How: the limit is set to ``limit`` (default: what the node's cgroup holds at that moment, so no room to grow), and
a co-located allocator grows in the cgroup, up to 32 MiB past the limit plus the page cache the kernel can reclaim
first, and stops at the first kill. The kernel must then free memory in the cgroup, and kills the process with
the largest footprint among the workers, whose ``oom_score_adj`` is raised to 1000 while the allocator pushes. A
second kill can come before the first victim's memory is freed (measured on docker: 6.5 ms after the first, when
the workers had 500 and the allocator 0; it took the launcher, and with it the node): so the allocator is given
``oom_score_adj -1000`` where the engine may lower it and the launcher too (``membase.shield``), else the
allocator gets just below the workers (``sacrifice_adj``: raising needs no privilege) and is itself the second
victim (an ``oom_killed`` event with ``role: allocator``), not the launcher. Every value is given back right after
the kill.
Without ``duration`` the previous limit comes back at once (one OOM kill, as a worker's spike gives); with one,
the limit stays that long and restarted workers meet it too (each further kill is recorded).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.capabilities import MEMORY_CGROUP
from chaos.cgroup import MiB, NodeMemory
from chaos.cgroup import cleanup as memory_cleanup
from chaos.cgroup import machine_checks as memory_checks
from chaos.faults.base import FaultContext, FaultKind, draw_duration, local_rank_problems
from chaos.faults.membase import (
    OomWatch,
    bias_victims,
    shield,
    start_allocator,
    stop_allocator,
    unbias,
)
from chaos.faults.storagebase import Bytes
from chaos.spec import FaultSpec, PositiveSeconds, Strict

if TYPE_CHECKING:
    from chaos.machine import Check

PAGE = 4096
# oom_score_adj the node's workers get while the allocator pushes (the one chosen with local_rank, or all): the
# kernel picks the largest of them, as it does when a worker outgrows a limit.
WORKER_ADJ = CHOSEN_ADJ = 1000


def sacrifice_adj(push: int, limit: int) -> int:
    """The allocator's oom_score_adj where it cannot get -1000 (no CAP_SYS_RESOURCE): below the workers' by more
    than its whole allocation weighs (the kernel's badness is rss + adj × limit / 1000), so a worker is killed
    first, yet far above the launcher's 0, so a second kill before the first victim's memory is freed takes the
    allocator, not the launcher and the node (measured on docker: 6.5 ms after the first, when the workers had 500
    and the allocator 0, it took the launcher)."""
    return max(0, 999 - -(-push * 1000 // max(limit, 1)))
PUSH = 32 * MiB  # how far past the limit the allocator asks: only a kill can make room, and it stays small


class OomKillOptions(FaultSpec):
    DURATION: ClassVar = "optional"
    kind: Literal["oom_kill"]
    limit: Bytes | None = Field(None, description="the node's memory limit (e.g. 1GB); default: what the node "
                                "holds at the injection, so it has no room to grow")
    wait: PositiveSeconds = Field(30.0, description="how long to wait for the OOM killer; if it has not acted by "
                          "then, the limit is lifted and the fault failed")
    local_rank: int | None = Field(None, ge=0, description="the worker (its LOCAL_RANK on the node) the kernel "
                                   "kills; default: the largest worker, the kernel's choice")


class OomKillExplore(Strict):
    """``explore.oom_kill``: the OOM kills ``chaos explore`` may generate (a duration from explore.durations, or
    none: the limit is lifted after the kill)."""

    limits: list[Bytes] = Field(default_factory=list, description="memory limits to draw from (e.g. [1GB]); "
                                "empty: the default, what the node holds at the injection")
    local_ranks: list[int] = Field(default_factory=list, description="workers the kernel may be made to kill; "
                                   "empty: the kernel's choice (the largest worker)")


def _mib(n: int | None) -> str:
    return "none" if n is None else f"{n / MiB:.0f} MiB"


class OomKill(FaultKind):
    kind = "oom_kill"
    options = OomKillOptions
    summary = "a memory limit on the node's cgroup; the kernel's OOM killer kills its largest process (exit -9)"
    needs = frozenset({MEMORY_CGROUP})
    explore_options = OomKillExplore
    colour = "#9467bd"
    # The kernel is made to kill a worker (a process with a LOCAL_RANK, membase.identify); a script that runs alone
    # has none, and the fault could only fail at its injection ("node0 has no worker running").
    layouts = frozenset({"elastic", "standalone"})

    @classmethod
    def layout_advice(cls, layout: str) -> str:
        return ("it makes the kernel kill a worker process, and this job has none: use kill_worker (SIGKILL to the "
                "training process, exit -9 as after an OOM kill) or memory_pressure (memory taken beside it, the "
                "kernel's OOM killer choosing) instead, or set cluster.procs_per_node: 2 (torchrun --standalone "
                "then starts workers)")

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        spec: OomKillOptions = ctx.spec
        run_id = ctx.runtime.run_id
        mem = NodeMemory.of(ctx.runtime, ctx.node, ctx.fault_id)
        before = mem.limit()
        watch = OomWatch(mem, ctx.runtime)
        usage = mem.usage()
        limit = spec.limit if spec.limit is not None else -(-usage // PAGE) * PAGE
        ctx.handles.append(watch)
        t0 = time.time()
        allocator = None
        # Past the limit even once the kernel has reclaimed all the page cache it can; the allocator stops growing
        # at the first kill, so it takes only what it took to make the kernel kill.
        push = max(limit - mem.anon(), 0) + PUSH
        workers = {pid: w for pid, w in watch.who.items() if w.get("role") == "worker"}
        chosen = [pid for pid, w in workers.items() if spec.local_rank in (None, w.get("local_rank"))]
        if not chosen:
            raise RuntimeError(f"{ctx.node} has no worker" + (f" with LOCAL_RANK={spec.local_rank}"
                                                              if spec.local_rank is not None else " running"))
        biased: dict[int, str] = {}
        try:
            biased = bias_victims(chosen, WORKER_ADJ if spec.local_rank is None else CHOSEN_ADJ)
            biased.update(shield([pid for pid, w in watch.who.items() if w.get("role") != "worker"]))
            mem.set_limit(limit, run_id)
            watch.limit = limit
            allocator = start_allocator(mem.path, push, spec.wait + 5, True, run_id, ctx.fault_id,
                                        ctx.runtime.log_path(f"{ctx.node}-oom_kill-{ctx.fault_id}"),
                                        counter=mem.path / mem.lay.events, fallback_adj=sacrifice_adj(push, limit))
            watch.allocator = allocator.pid
            deadline = time.monotonic() + spec.wait
            while mem.oom_kills() == watch.counted and time.monotonic() < deadline:
                time.sleep(0.01)
            t_kill = time.time()
            killed = mem.oom_kills() > watch.counted
        except BaseException:
            stop_allocator(allocator)
            unbias(biased)
            watch.klog.close()
            if mem.before:
                mem.restore()
            raise
        code = stop_allocator(allocator)
        adj_problems = unbias(biased)
        ctx.details.update({"cgroup": str(mem.path), "cgroup_version": mem.lay.version, "usage_bytes": usage,
                            "limit_bytes": limit, "previous_limit_bytes": before,
                            "allocator_protected": getattr(allocator, "protected", False)})
        first = watch.poll(ctx.fault_id, self.kind, settle_s=1.0, final=True) if killed else []  # the victims now
        if not killed or all(k.get("role") == "allocator" for k in first):
            watch.klog.close()
            restored = mem.restore()
            what = (f"the OOM killer did not act within {spec.wait:g}s" if not killed else
                    f"the OOM killer killed only the co-located allocator (exit {code}), no process of the node")
            raise RuntimeError(f"{what} (limit {_mib(limit)}, usage {_mib(usage)}); limit lifted, restored "
                               f"exactly: {restored['restored']}")
        ctx.details["time_to_oom_kill_s"] = round(t_kill - t0, 3)
        watch.queued = first  # written by observe() right after fault_injected
        victims = ", ".join(f"pid {k['pid']} ({k.get('role', '?')}"
                            + (f" local_rank {k['local_rank']}" if "local_rank" in k else "") + ")" for k in first)
        ctx.details["victims"] = [{k: v for k, v in e.items() if k in ("pid", "role", "rank", "local_rank")}
                                     for e in first]
        if spec.duration is None:
            watch.klog.close()
            restored = mem.restore()
            if adj_problems:
                restored = {"restored": False, "problems": restored.get("problems", []) + adj_problems}
            ctx.details.update(restored)
        else:
            watch.problems += adj_problems
        return (f"memory limit {_mib(limit)} on {ctx.node}'s cgroup v{mem.lay.version} (was {_mib(before)}, "
                f"usage {_mib(usage)}) + a co-located allocator growing until the kernel kills (at most {_mib(push)})"
                f"{' (oom_score_adj -1000)' if ctx.details['allocator_protected'] else ''}: "
                f"the kernel's OOM killer killed {victims or 'a process (no kernel log line)'} after "
                f"{t_kill - t0:.2f}s" + ("; limit lifted at once" if spec.duration is None else ""))

    def observe(self, ctx: FaultContext) -> list[dict[str, Any]]:
        watch = next((h for h in ctx.handles if isinstance(h, OomWatch)), None)
        if watch is None:
            return []
        out, watch.queued = watch.queued, []
        if ctx.spec.duration is not None and watch.klog.fd is not None:
            out += watch.poll(ctx.fault_id, self.kind, final=ctx.closing)
        return out

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        watch = next(h for h in ctx.handles if isinstance(h, OomWatch))
        watch.klog.close()
        restored = watch.mem.restore()
        if watch.problems:
            restored = {"restored": False, "problems": restored.get("problems", []) + watch.problems}
        return restored

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        return memory_cleanup(run_id, only_orphans)

    @classmethod
    def machine_checks(cls) -> list[Check]:
        return memory_checks()

    @classmethod
    def describe(cls, spec: Any) -> str:
        text = f"limit {_mib(spec.limit)}" if spec.limit is not None else "limit at current usage"
        text += f", kills local_rank {spec.local_rank}" if spec.local_rank is not None else ""
        return text + (f" for {spec.duration:g}s" if spec.duration is not None else ", lifted after the kill")

    @classmethod
    def check(cls, spec: Any, scenario: Any) -> list[str]:
        return local_rank_problems("local_rank", [getattr(spec, "local_rank", None)], scenario)

    @classmethod
    def check_explore(cls, section: Any, scenario: Any) -> list[str]:
        return local_rank_problems("local_ranks", section.local_ranks, scenario)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        section = cls.explore_bounds(bounds)
        out: dict[str, Any] = {"duration": draw_duration(draw, bounds, until_end=True)}
        if section.limits:
            out["limit"] = draw(st.sampled_from(section.limits))
        if section.local_ranks:
            out["local_rank"] = draw(st.sampled_from(section.local_ranks))
        return out
