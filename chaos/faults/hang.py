"""Hang: one rank stops making progress while its process stays alive (a wedged GPU, a deadlock, a stuck collective).

Two mechanisms (``mode``):

- ``main_thread`` (needs the probe: the shipped workload, or a script calling ``chaos.probe.step_completed``): the
  engine gives the order over the history channel to that worker's probe (``ChannelServer.order``; it also writes the
  order file ``<history>.acks/hang-<node>-<local rank>`` atomically, which a probe without a channel reads instead);
  the rank's main thread takes it in at its next completed step and blocks in the probe
  (``chaos.probe._hang_if_ordered``) while its process, the process group's threads and every other thread keep
  running, exactly as a rank stuck before its next collective (``hold_gil: true``: it spins holding the GIL, so other
  Python threads starve too). The probe writes ``hang_started`` when it blocks and ``hang_released`` when it is let
  go. Heal withdraws the order; a process that started after the order (a restarted worker) never obeys it, and a
  probe that finds the engine gone (its channel refused, or without a channel its heartbeat stale) lets go by itself
  (an engine SIGKILLed mid-fault leaves no stuck rank).
- ``process`` (any script): SIGSTOP to the one worker process (``local_rank``) on the target node, not its node;
  its launcher and the other workers run on. Heal sends SIGCONT to exactly the processes it stopped that still live
  (``restored`` says whether none is left stopped). The engine writes ``hang_started`` with the stopped pids; an
  engine SIGKILLed mid-fault leaves the worker stopped until ``chaos cleanup`` (the runtime's cleanup kills marked
  orphans, stopped ones included: chaos.marks.kill_marked).

Without ``mode`` the shipped workload gets ``main_thread`` and a ``command:`` workload ``process`` (a script without
the probe would never read the order). Without ``duration`` the hang lasts until the run ends: whether the job
notices it (a process-group timeout, then torchrun restarts the workers) or hangs (the engine's stall timeout, the
verdict ``hung`` naming the stuck rank) is what analysis reports (chaos/analysis/hangs.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos.capabilities import KILL_WORKERS
from chaos.events import Ev
from chaos.faults.base import FaultContext, FaultKind, draw_duration, local_rank_problems
from chaos.spec import FaultSpec, Strict
from chaos.workload import ShippedWorkload

if TYPE_CHECKING:
    from chaos.scenario import Scenario

MODES = ("main_thread", "process")
ORDER_PREFIX = "hang-"  # chaos.probe reads <history>.acks/hang-<node>-<local rank> (the probe keeps its own copy)


class HangOptions(FaultSpec):
    DURATION: ClassVar = "optional"
    kind: Literal["hang"]
    mode: Literal["main_thread", "process"] | None = Field(
        None, description="main_thread: the rank's main thread blocks in the probe at its next step while its "
        "process and other threads live (needs the probe); process: SIGSTOP to the one worker process (any "
        "script). Default: main_thread for the shipped workload, process for a command workload")
    local_rank: int = Field(0, ge=0, description="the worker on the target node that hangs (its LOCAL_RANK)")
    hold_gil: bool = Field(False, description="main_thread only: the stuck main thread spins holding the GIL "
                           "(other Python threads starve; native threads such as the process group's run on) "
                           "instead of sleeping")


class HangExplore(Strict):
    """``explore.hang``: the hangs ``chaos explore`` may generate."""

    modes: list[Literal["main_thread", "process"]] = Field(
        default_factory=list, description="mechanisms to draw from; empty: the workload's default mode")
    local_ranks: list[int] = Field(default_factory=lambda: [0], min_length=1,
                                   description="workers (LOCAL_RANK) that may hang")
    until_end: bool = Field(False, description="a hang may also last until the run ends (no duration): the job "
                            "must notice it, or the verdict is hung")


def resolved_mode(spec: Any, scenario: Any) -> str:
    """The mode a hang runs in: as written, else by whether the workload calls the probe."""
    if spec.mode is not None:
        return str(spec.mode)

    return "main_thread" if isinstance(getattr(scenario, "workload", None), ShippedWorkload) else "process"


def order_path(events_path: str | Path, node: str, local_rank: int) -> Path:
    return Path(str(events_path) + ".acks") / f"{ORDER_PREFIX}{node}-{local_rank}"


def _stopped(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _rank_of(pid: int) -> tuple[int | None, int | None]:
    import psutil

    try:
        env = psutil.Process(pid).environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None, None
    rank, local = env.get("RANK", ""), env.get("LOCAL_RANK", "")
    return (int(rank) if rank.isdigit() else None), (int(local) if local.isdigit() else None)


class Hang(FaultKind):
    kind = "hang"
    options = HangOptions
    summary = ("one rank blocks while its process lives: its main thread stuck in the probe (main_thread) or the "
               "worker process SIGSTOPped (process), for `duration` or until the run ends")
    needs = frozenset({KILL_WORKERS})
    lasts_until_healed = True
    colour = "#393b79"
    explore_options = HangExplore

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.plan is not None
        spec = ctx.spec
        mode = resolved_mode(spec, ctx.plan.scenario)
        ctx.details.update(hang_mode=mode, local_rank=spec.local_rank)
        if mode == "main_thread":
            events = ctx.plan.node(ctx.node).env.get("CHAOS_EVENTS") or str(ctx.plan.run_dir / "events.jsonl")
            order = order_path(events, ctx.node, spec.local_rank)
            tmp = order.with_name(f".{order.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"fault_id": ctx.fault_id, "t": time.time(), "node": ctx.node,
                                       "local_rank": spec.local_rank, "hold_gil": spec.hold_gil}))
            os.replace(tmp, order)  # atomic: the probe never reads half an order
            ctx.handles.append(order)
            ctx.details["order"] = str(order)
            if ctx.channel is not None:  # a probe on the history channel takes its orders from there, not the file
                ctx.channel.order(order.name, f"{ctx.node}-{spec.local_rank}", json.loads(order.read_text()))
            return (f"hang order to {ctx.node} local rank {spec.local_rank} through the probe: its main thread "
                    "blocks at its next step while its process and other threads live")
        mechanism = ctx.runtime.kill_workers(ctx.node, sig=signal.SIGSTOP, local_rank=spec.local_rank)
        pids: list[int] = []
        deadline = time.monotonic() + 1.0  # the signal is sent; the kernel shows the process stopped a moment later
        while not pids and time.monotonic() < deadline:
            try:
                pids = [p for p in ctx.runtime.node_pids(ctx.node) if _stopped(p)]
            except Exception:  # a runtime without node_pids: heal falls back to the runtime's signal
                break
            if not pids:
                time.sleep(0.01)
        ctx.details["pids"] = pids
        ctx.handles.append({"pids": pids, "reported": False})
        return f"{mechanism} (process hang: SIGCONT at heal)"

    def observe(self, ctx: FaultContext) -> list[dict[str, Any]]:
        """Process mode: the engine's record that the worker is stopped (the probe writes main_thread's)."""
        if ctx.details.get("hang_mode") != "process" or not ctx.handles or ctx.handles[0]["reported"]:
            return []
        ctx.handles[0]["reported"] = True
        pids = ctx.handles[0]["pids"]
        rank, local = _rank_of(pids[0]) if len(pids) == 1 else (None, None)
        event: dict[str, Any] = {"event": Ev.HANG_STARTED, "fault_id": ctx.fault_id,
                                 "mode": "process", "node": ctx.node, "pid": pids[0] if len(pids) == 1 else pids,
                                 "local_rank": ctx.spec.local_rank if local is None else local}
        if rank is not None:
            event["rank"] = rank
        return [event]

    def heal(self, ctx: FaultContext) -> dict[str, Any]:
        assert ctx.node is not None
        if ctx.details.get("hang_mode") == "main_thread":
            order = ctx.handles[0] if ctx.handles else None
            if order is not None:
                Path(order).unlink(missing_ok=True)
                if ctx.channel is not None:
                    ctx.channel.order(Path(order).name, f"{ctx.node}-{ctx.spec.local_rank}", None)
            return {"mode": "main_thread", "restored": order is None or not Path(order).exists()}
        pids = ctx.handles[0]["pids"] if ctx.handles else []
        if not pids:  # the stopped pids were unknown: signal the rank's workers as the fault did
            ctx.runtime.kill_workers(ctx.node, sig=signal.SIGCONT, local_rank=ctx.spec.local_rank)
            return {"mode": "process", "released": "SIGCONT through the runtime", "restored": None}
        import psutil

        continued, gone = [], []
        for pid in pids:
            try:
                psutil.Process(pid).send_signal(signal.SIGCONT)
                continued.append(pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                gone.append(pid)
        still = [p for p in continued if _stopped(p)]
        return {"mode": "process", "continued": continued, "gone": gone, "restored": not still,
                **({"problems": [f"pid {p} still stopped" for p in still]} if still else {})}

    @classmethod
    def check(cls, spec: Any, scenario: Scenario) -> list[str]:
        problems = local_rank_problems("local_rank", [spec.local_rank], scenario)
        if spec.hold_gil and resolved_mode(spec, scenario) != "main_thread":
            problems.append("hold_gil: applies to mode: main_thread only (a stopped process holds nothing)")
        return problems

    @classmethod
    def check_explore(cls, section: Any, scenario: Scenario) -> list[str]:
        return local_rank_problems("local_ranks", section.local_ranks, scenario)

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        section = cls.explore_bounds(bounds)
        out: dict[str, Any] = {"local_rank": draw(st.sampled_from(section.local_ranks)),
                               "duration": draw_duration(draw, bounds, until_end=section.until_end)}
        if section.modes:
            out["mode"] = draw(st.sampled_from(section.modes))
        return out
