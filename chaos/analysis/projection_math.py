"""The projection's arithmetic, apart from its inputs and reports: the failure model's closed forms (Daly's
expected wall time, Young's first order) and the Monte Carlo of one job's failures and restarts.

A leaf module (numpy and the standard library): :mod:`chaos.analysis.projection` (the inputs, the sweep, the
projection) and :mod:`chaos.analysis.projection_uncertainty` (the interval, the sensitivity) both compute with it,
and neither imports the other's module for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chaos.analysis.projection_presets import HOUR

MAX_DRAWS = 5_000_000  # failures drawn over all trials of one interval: beyond it the job barely progresses


class ProjectionError(ValueError):
    """Input the projection cannot use; the message names the option or the missing measurement."""


def daly_wall_s(work_s: float, tau: float, c: float, r: float, m: float) -> float:
    """Expected wall time to do ``work_s`` of training under the model (Daly 2006, exact for exponential
    failures): n full segments of τ + C and one of the remainder + C, each costing M·e^{R/M}·(e^{s/M} − 1)."""
    n, rem = segment_count(work_s, tau)
    per = [(n, tau + c)] + ([(1, rem + c)] if rem > 0 else [])
    return sum(k * m * math.exp(r / m) * math.expm1(s / m) for k, s in per)


def young_ratio(tau: float, c: float, r: float, m: float) -> float:
    """Young's first-order effective training time ratio, 1 − C/τ − (τ + C)/(2M) − R/M (for τ, C, R ≪ M)."""
    return 1 - c / tau - (tau + c) / (2 * m) - r / m


def segment_count(work_s: float, tau: float) -> tuple[int, float]:
    n = int(work_s // tau)
    rem = work_s - n * tau
    if rem <= 1e-9 * tau:
        rem = 0.0
    return n, rem


# --------------------------------------------------------------------------------------------------------------
# Monte Carlo


@dataclass
class Simulation:
    """Per-trial totals (seconds) of one interval's Monte Carlo; useful work is the same in every trial."""

    work_s: float
    wall: np.ndarray
    checkpointing: np.ndarray  # completed saves
    rework: np.ndarray  # training lost to failures (redone)
    wasted_saves: np.ndarray  # saves interrupted by a failure
    recovery: np.ndarray  # restarts, interrupted ones included
    failures: np.ndarray  # all of them: during work, saves and restarts


def _trunc_exp(rng: np.random.Generator, rate: float, upper: float, size: int) -> np.ndarray:
    """Exponential(rate) draws conditioned on being < upper: when within an attempt a failure came."""
    q = -math.expm1(-rate * upper)
    return -np.log1p(-rng.random(size) * q) / rate


def _neg_binomial(rng: np.random.Generator, n: np.ndarray | int, p: float, trials: int) -> np.ndarray:
    """Failures before ``n`` successes, per trial (0 where n = 0: numpy refuses n = 0)."""
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), (trials,))
    out = np.zeros(trials, dtype=np.int64)
    live = n > 0
    if live.any():
        out[live] = rng.negative_binomial(n[live], p)
    return out


def _per_trial(trials: int, counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.bincount(np.repeat(np.arange(trials), counts), weights=values, minlength=trials)


def simulate(work_s: float, tau: float, c: float, r: float, m: float, trials: int,
             rng: np.random.Generator) -> Simulation:
    """Draw ``trials`` jobs of ``work_s`` seconds of training under the model (module docstring).

    Failures are memoryless, so each segment (τ of work, then a save of C) is tried until one attempt sees no
    failure: failures per segment are geometric, their number over n segments negative binomial, and when a
    failure comes within an attempt is an exponential draw truncated to the attempt. Each failure is followed by
    a restart of R, retried the same way when a failure interrupts it.
    """
    if min(tau, m) <= 0 or c < 0 or r < 0 or work_s <= 0:
        raise ProjectionError("interval, MTBF and job length must be > 0; checkpoint cost and recovery ≥ 0")
    rate = 1 / m
    n, rem = segment_count(work_s, tau)
    kinds = [(n, tau + c)] + ([(1, rem + c)] if rem > 0 else [])
    worst = max(s for _, s in [*kinds, (0, r)]) * rate
    expected = math.inf if worst > 700 else (  # e^700 is near the float limit: far beyond MAX_DRAWS anyway
        sum(k * math.expm1(s * rate) for k, s in kinds) * math.exp(r * rate) * trials)
    if not expected < MAX_DRAWS:
        raise ProjectionError(f"an interval of {tau / HOUR:.3g} h with a job MTBF of {m / HOUR:.3g} h fails "
                              f"{expected / trials:.3g} times per job: the job barely progresses; shorten the "
                              "interval or the job")
    zeros = np.zeros(trials)
    failures = np.zeros(trials, dtype=np.int64)
    rework, wasted = zeros.copy(), zeros.copy()
    for count, length in kinds:
        if count == 0:
            continue
        f = _neg_binomial(rng, count, math.exp(-length * rate), trials)
        at = _trunc_exp(rng, rate, length, int(f.sum()))
        work_part = length - c
        rework += _per_trial(trials, f, np.minimum(at, work_part))
        wasted += _per_trial(trials, f, np.maximum(at - work_part, 0.0))
        failures += f
    interrupted = _neg_binomial(rng, failures, math.exp(-r * rate), trials) if r > 0 else np.zeros(trials, np.int64)
    lost_restarts = _per_trial(trials, interrupted, _trunc_exp(rng, rate, r, int(interrupted.sum()))) if r > 0 \
        else zeros.copy()
    recovery = failures * r + lost_restarts
    checkpointing = np.full(trials, (n + (rem > 0)) * c, dtype=float)
    wall = work_s + checkpointing + rework + wasted + recovery
    return Simulation(work_s, wall, checkpointing, rework, wasted, recovery, (failures + interrupted).astype(float))
