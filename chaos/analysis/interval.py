"""Checkpoint-interval advice from measured figures: Young's and Daly's optimum, and the goodput to expect.

With checkpoint cost C, mean time between failures M and restart cost R, the classic first-order model of the
fraction of time lost is  C/τ  (checkpointing)  +  (τ + C)/(2M)  (work redone after a failure, on average half
an interval)  +  R/M  (restarts), for τ seconds of work between checkpoints. Young's optimum is τ = √(2CM);
Daly's higher-order refinement is τ = √(2CM)·[1 + ⅓√(C/2M) + ⅑(C/2M)] − C (for C < 2M, else τ = M).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from chaos.analysis.ckpt_source import checkpoint_events
from chaos.events import Ev
from chaos.history import Event


def save_costs(events: list[Event]) -> list[float]:
    """Wall time of every checkpoint save (save started → save finished, same process and step): the projection
    needs their spread, not only the median."""
    started = {(e.get("pid"), e.get("step")): e["t"] for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_STARTED)}
    return [e["t"] - started[(e.get("pid"), e.get("step"))]
            for e in checkpoint_events(events, Ev.CHECKPOINT_SAVE_FINISHED)
            if (e.get("pid"), e.get("step")) in started]


def save_cost_s(events: list[Event]) -> float | None:
    """Median wall time of a checkpoint save (:func:`save_costs`)."""
    costs = save_costs(events)
    return statistics.median(costs) if costs else None


def young(c: float, m: float) -> float:
    return math.sqrt(2 * c * m)


def daly(c: float, m: float) -> float:
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def expected_goodput(tau: float, c: float, m: float, r: float) -> float:
    return max(0.0, 1 - c / tau - (tau + c) / (2 * m) - r / m)


def interval_advice(save_cost: float | None, mtbf_s: float | None, checkpoint_every_steps: int | None,
                    median_step_s: float | None, recovery_s: float | None) -> dict[str, Any] | None:
    """Young's and Daly's interval for the measured save cost (``save_cost_s``) and an MTBF; None without saves."""
    c = save_cost
    if c is None:
        return None
    out: dict[str, Any] = {"save_cost_s": c, "mtbf_s": mtbf_s, "restart_cost_s": recovery_s or 0.0}
    current = checkpoint_every_steps * median_step_s if checkpoint_every_steps and median_step_s else None
    out["current_interval_s"] = current
    if mtbf_s is None:
        out["note"] = "give an MTBF (chaos report --mtbf 6h, or checks.mtbf_s) for interval advice"
        return out
    r = recovery_s or 0.0
    if mtbf_s <= c:  # Young and Daly assume failures far rarer than saves; below that their figures mean nothing
        out["warning"] = (f"M = {mtbf_s:g} s is no longer than one save (C = {c:g} s): no checkpoint interval keeps "
                          "progress at that failure rate; Young's and Daly's intervals are only the formulas' "
                          "limits there")
    out["young_interval_s"] = young(c, mtbf_s)
    out["daly_interval_s"] = daly(c, mtbf_s)
    out["expected_goodput_at_daly"] = expected_goodput(out["daly_interval_s"], c, mtbf_s, r)
    if current:
        out["expected_goodput_at_current"] = expected_goodput(current, c, mtbf_s, r)
        if median_step_s:
            out["daly_interval_steps"] = max(1, round(out["daly_interval_s"] / median_step_s))
    return out
