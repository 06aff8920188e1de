"""Native crashes of one worker: ``segfault`` (SIGSEGV) and ``abort`` (SIGABRT).

A worker that dies in native code (a CUDA driver fault, a bad extension, ``std::terminate``) does not look like an
OOM kill: the launcher reports exit code -11 or -6, not -9, and core-dump handlers and log scrapers treat them
differently. These kinds deliver exactly that signal to the worker(s) of one node (one ``local_rank``, or all), so
a job's crash handling can be tested against what it will really see; the history records the signal in the
mechanism, and the node log shows the launcher's own report of it.
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaos.capabilities import KILL_WORKERS
from chaos.faults.base import FaultContext, FaultKind, local_rank_problems
from chaos.spec import FaultSpec, Strict


class _NativeCrashOptions(FaultSpec):
    local_rank: int | None = Field(
        None, ge=0, description="the one worker (its LOCAL_RANK on the target node) that crashes; all when absent")


class SegfaultOptions(_NativeCrashOptions):
    kind: Literal["segfault"]


class AbortOptions(_NativeCrashOptions):
    kind: Literal["abort"]


class NativeCrashExplore(Strict):
    """``explore.segfault`` / ``explore.abort``: which workers a generated native crash hits."""

    local_ranks: list[int] = Field(default_factory=list, description="workers (LOCAL_RANK) one of which may be "
                                   "drawn; empty: every worker of the node")


class _NativeCrash(FaultKind):
    signal: ClassVar[int]
    needs = frozenset({KILL_WORKERS})
    explore_options = NativeCrashExplore

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None
        local_rank = getattr(ctx.spec, "local_rank", None)
        ctx.details["signal"] = signal.Signals(self.signal).name
        if local_rank is not None:
            ctx.details["local_rank"] = local_rank
        return ctx.runtime.kill_workers(ctx.node, sig=self.signal, local_rank=local_rank)

    @classmethod
    def check(cls, spec: Any, scenario: Any) -> list[str]:
        return local_rank_problems("local_rank", [getattr(spec, "local_rank", None)], scenario)

    @classmethod
    def check_explore(cls, section: Any, scenario: Any) -> list[str]:
        return local_rank_problems("local_ranks", section.local_ranks, scenario)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        ranks = cls.explore_bounds(bounds).local_ranks
        return {"local_rank": draw(st.sampled_from(ranks))} if ranks else {}


class Segfault(_NativeCrash):
    kind = "segfault"
    options = SegfaultOptions
    signal = signal.SIGSEGV
    summary = "a worker dies of SIGSEGV (launcher exit code -11), as a crash in native code does"
    colour = "#e377c2"


class Abort(_NativeCrash):
    kind = "abort"
    options = AbortOptions
    signal = signal.SIGABRT
    summary = "a worker dies of SIGABRT (launcher exit code -6), as std::terminate or a failed assert does"
    colour = "#bcbd22"
