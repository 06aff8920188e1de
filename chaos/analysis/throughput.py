"""Throughput and cost figures of one run (what ``chaos compare`` puts side by side), from its history."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from chaos.analysis.checkpoints import _lineage_losses
from chaos.analysis.load import of_kind, step_table
from chaos.analysis.metrics import first_disruptive_fault_t, step_intervals
from chaos.analysis.result_model import ResultModel
from chaos.events import Ev
from chaos.history import Event
from chaos.workload_args import SHIPPED


@dataclass(frozen=True)
class Throughput:
    """Fault-free pace, start-up time, the first disruptive fault's cost and the cost per useful step (None: not
    measured)."""

    steps_per_s: float | None = None
    samples_per_s: float | None = None
    comm_share: float | None = None  # median communication share of a rank-0 step
    time_to_first_step_s: float | None = None
    recovery_s: float | None = None  # the first disruptive fault's
    lost_work_s: float | None = None
    lost_steps: int | None = None
    node_seconds_per_step: float | None = None


def throughput(events: list[Event], result: ResultModel, nodes: int) -> Throughput:
    """Fault-free pace (steps/s, samples/s, communication share), start-up time, the first disruptive fault's
    cost, and node-seconds per useful step. ``result`` is the run's result (median step, faults)."""
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
    median = result.median_step_s
    disruptive = result.disruptive_faults
    first = disruptive[0] if disruptive else None
    duration = result.duration_s
    useful = result.steps_completed
    return Throughput(
        steps_per_s=(1 / median) if median else None,
        samples_per_s=(statistics.median(samples_per_step.values()) / median)
        if median and samples_per_step else None,
        comm_share=statistics.median(shares) if shares else None,
        time_to_first_step_s=(first_step - started) if first_step is not None and started is not None else None,
        recovery_s=first.recovery_s if first else None,
        lost_work_s=first.lost_work_s if first else None,
        lost_steps=first.lost_steps if first else None,
        node_seconds_per_step=(nodes * duration / useful) if duration and useful else None,
    )


def time_to_result(events: list[Event]) -> float | None:
    """Seconds from the run's start until the training's highest step was first completed (by any rank): the
    wall time to the result, faults and recoveries included. None without a start or a step."""
    started = next((e["t"] for e in of_kind(events, Ev.RUN_STARTED)), None)
    table = step_table(events)
    steps = table.values("step")
    if started is None or not len(steps):
        return None
    last = max(steps)
    return min(t for t, s in zip(table.values("t"), steps, strict=True) if s == last) - started


def final_loss(events: list[Event]) -> tuple[int | None, float | None]:
    """Rank 0's loss at the highest step of the surviving lineage (the model the run ended with): (step, loss)."""

    losses = _lineage_losses(events)[0]
    if not losses:
        return None, None
    last = max(losses)
    return last, losses[last]


# What decides the model a shipped workload trains (not how often it saves, or how slowly it runs): two runs with
# the same values train on the same global batches in the same order, whatever their world size.
TRAINING_ARGS = ("steps", "global_batch", "dataset_size", "features", "hidden", "lr", "seed", "data_seed", "bug")


def training_setup(workload: Any) -> dict[str, Any] | None:
    """The shipped workload's model-deciding arguments with defaults filled in (None for a command workload, whose
    global batch torch-chaos cannot know)."""

    declared = SHIPPED.get(getattr(workload, "name", None) or "")
    if declared is None or getattr(workload, "command", None) is not None:
        return None
    # a workload that declares no `steps` (tf-mlp's epochs, flower-mlp's rounds) has none of it in its setup
    return {k: workload.args.get(k, declared[k].default) for k in TRAINING_ARGS if k in declared}


def impaired_pace(events: list[Event]) -> tuple[float | None, float | None, int]:
    """(steps/s, communication share, steps measured) under the point's impairment: over the steps completed after
    the last ``fault_injected`` (every node's link impaired from there on; the whole run for a point without
    faults). Not result.json's median step: that one is taken before the first disruptive fault when at least three
    steps came before it, and a delay fault's mechanism can take that long to land (measured: a 20ms point reported
    the unimpaired pace of its first steps, 26.5 steps/s, while its steps took 0.52 s)."""
    t_from = max((f["t"] for f in of_kind(events, Ev.FAULT_INJECTED)), default=float("-inf"))
    intervals = step_intervals(events, t_from=t_from)
    table = step_table(events)
    shares = [comm / duration for t, rank, comm, duration in zip(
        table.values("t"), table.values("rank", 0), table.values("comm_s"), table.values("duration_s"), strict=True)
        if t >= t_from and rank == 0 and comm is not None and duration]
    interval = statistics.median(intervals) if intervals else 0.0
    pace = 1 / interval if interval > 0 else None
    return pace, (statistics.median(shares) if shares else None), len(intervals)
