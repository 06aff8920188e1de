"""Throughput and cost figures of one run (what ``chaos compare`` puts side by side), from its history."""

from __future__ import annotations

import statistics
from typing import Any

from chaos.analysis.load import of_kind, step_table
from chaos.analysis.metrics import first_disruptive_fault_t
from chaos.events import Ev
from chaos.history import Event


def throughput(events: list[Event], result: dict[str, Any], nodes: int) -> dict[str, Any]:
    """Fault-free pace (steps/s, samples/s, communication share), start-up time, the first disruptive fault's
    cost, and node-seconds per useful step. ``result`` is the run's result.json content (median step, faults)."""
    before = first_disruptive_fault_t(events)
    samples_per_step: dict[tuple[Any, int], int] = {}
    shares: list[float] = []
    started = next((e["t"] for e in of_kind(events, Ev.RUN_STARTED)), None)
    table = step_table(events)
    times = table.values("t")
    first_step = min(times) if len(times) else None
    for t, inc, s, samples, rank, comm, duration in zip(
            times, table.values("incarnation"), table.values("step"), table.values("samples"),
            table.values("rank", 0), table.values("comm_s"), table.values("duration_s"), strict=True):
        if t >= before:
            continue
        key = (inc, s)
        samples_per_step[key] = samples_per_step.get(key, 0) + int(samples or 0)
        if rank == 0 and comm is not None and duration:
            shares.append(comm / duration)
    median = result["median_step_s"]
    disruptive = [f for f in result["faults"] if f.get("disruptive", True) and f.get("injected", True)]
    first = disruptive[0] if disruptive else {}
    duration = result["duration_s"]
    useful = result["steps_completed"]
    return {
        "steps_per_s": (1 / median) if median else None,
        "samples_per_s": (statistics.median(samples_per_step.values()) / median)
        if median and samples_per_step else None,
        "comm_share": statistics.median(shares) if shares else None,
        "time_to_first_step_s": (first_step - started) if first_step is not None and started is not None else None,
        "recovery_s": first.get("recovery_s"),
        "lost_work_s": first.get("lost_work_s"),
        "lost_steps": first.get("lost_steps"),
        "node_seconds_per_step": (nodes * duration / useful) if duration and useful else None,
    }
