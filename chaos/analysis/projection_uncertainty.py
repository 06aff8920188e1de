"""The projection's headline with a real interval, its cost in GPU-hours, and how it moves with each input.

The Monte Carlo of :mod:`chaos.analysis.projection` draws failures for *fixed* inputs, so its CI only says how well
1,000 jobs pin down the expected value (it shrinks to nothing with more trials). What a reviewer needs is how
uncertain the answer is because the inputs are: a recovery seen a handful of times, an MTBF from a finite count of
failures. Here the inputs are drawn from what is known about them and pushed through Daly's exact closed form
(checked against the Monte Carlo in tests/test_projection.py):

- recovery R: the fit's standard error of the mean at N when it is extrapolated from runs at several node counts;
  else a bootstrap of the mean over the measured restarts (or the incident downtimes) when there are two or more;
  else exact;
- node MTBF: from k counted failures over an exposure, the rate is Gamma(k, 1/exposure) (the exact chi-square
  interval of a Poisson count, failure-truncated): the incident CSV and the presets have a k; a supplied
  ``--mtbf-node`` has none and is taken as exact;
- checkpoint cost C: a bootstrap of the median over the run's saves when it is measured here; exact when supplied;
- step time, interval, node count: taken as exact (said so beside the interval).

The interval printed is the 2.5–97.5 percentiles of the expected lost hours over those draws (what the inputs'
uncertainty does to the answer), and beside it the same for single jobs (each draw also draws one job's failures:
the job-to-job randomness on top). Sensitivity: the closed form again, one input at a time ×0.5 and ×2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from chaos.analysis.projection_math import ProjectionError, segment_count, simulate
from chaos.analysis.projection_presets import HOUR

if TYPE_CHECKING:
    from chaos.analysis.projection import FailureModel, Measured

DRAWS = 4000  # input draws for the interval of the expected value (closed form: cheap)
JOB_DRAWS = 400  # of which this many also draw one job's failures (Monte Carlo: the expensive part)
FACTORS = (0.5, 2.0)


def expected_wall(work_s: float, tau: float, c: np.ndarray | float, r: np.ndarray | float,
                  m: np.ndarray | float) -> np.ndarray:
    """Daly's exact expected wall time (``projection.daly_wall_s``), vectorised over C, R and M."""
    n, rem = segment_count(work_s, tau)
    c, r, m = np.asarray(c, dtype=float), np.asarray(r, dtype=float), np.asarray(m, dtype=float)
    segments = n * np.expm1((tau + c) / m) + (np.expm1((rem + c) / m) if rem > 0 else 0.0)
    with np.errstate(over="ignore"):
        return m * np.exp(r / m) * segments


@dataclass(frozen=True)
class Headline:
    """The answer a reviewer quotes, at one checkpoint interval, with its interval and its cost."""

    interval_s: float
    which: str  # "the current interval" or "the best interval in the sweep"
    lost_hours: float  # expected, closed form at the inputs as used
    ettr: float
    lost_hours_95: tuple[float, float]  # expected lost hours over the inputs' uncertainty
    ettr_95: tuple[float, float]
    job_lost_hours_95: tuple[float, float]  # single jobs: inputs' uncertainty and each job's own failures
    covers: tuple[str, ...]  # the inputs whose uncertainty the interval carries
    exact: tuple[str, ...]  # the inputs taken as exact
    nodes: int
    gpus_per_node: int
    gpu_hours: float  # lost GPU-hours per job (expected)
    gpu_hours_95: tuple[float, float]
    price_per_gpu_hour: float | None
    draws: int
    skipped_draws: int = 0  # draws whose job barely progresses (too many failures to simulate)

    @property
    def cost(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    @property
    def cost_95(self) -> tuple[float, float] | None:
        p = self.price_per_gpu_hour
        return None if p is None else (self.gpu_hours_95[0] * p, self.gpu_hours_95[1] * p)


@dataclass(frozen=True)
class SensitivityRow:
    """The headline with one input multiplied by each of FACTORS, the others as used."""

    input: str
    value: float  # the value used, in ``unit``
    unit: str  # "s", "h" or "nodes"
    lost_hours: tuple[float, ...]  # one per factor
    ettr: tuple[float, ...]
    note: str = ""


@dataclass
class Uncertainty:
    headline: Headline
    sensitivity: list[SensitivityRow] = field(default_factory=list)


def _recovery_draws(measured: Measured, nodes: int, rng: np.random.Generator) -> tuple[np.ndarray, str | None]:
    r = measured.recovery_s
    fit = measured.recovery_fit
    if measured.recovery_origin.startswith("extrapolated") and fit is not None:
        se = fit.mean_se(nodes)
        if se is None:
            return np.full(DRAWS, r), None
        return np.maximum(rng.normal(r, se, DRAWS), 0.0), (f"recovery R: the fit's standard error at N = {nodes:,} "
                                                           f"(±{se:.3g} s, 1 s.e.)")
    samples = np.array(measured.recovery_samples, dtype=float)
    if len(samples) >= 2:
        means = samples[rng.integers(0, len(samples), (DRAWS, len(samples)))].mean(axis=1)
        return means * (r / samples.mean()), (f"recovery R: bootstrap of the mean over {len(samples)} "
                                              f"{measured.recovery_samples_of}")
    return np.full(DRAWS, r), None


def _save_draws(measured: Measured, rng: np.random.Generator) -> tuple[np.ndarray, str | None]:
    c, samples = measured.checkpoint_cost_s, np.array(measured.save_samples, dtype=float)
    if len(samples) < 2 or not np.median(samples) > 0:
        return np.full(DRAWS, c), None
    medians = np.median(samples[rng.integers(0, len(samples), (DRAWS, len(samples)))], axis=1)
    return medians * (c / float(np.median(samples))), (f"checkpoint cost C: bootstrap of the median over "
                                                       f"{len(samples)} saves measured here")


def _mtbf_draws(model: FailureModel, rng: np.random.Generator) -> tuple[np.ndarray, str | None]:
    k = model.failures_counted
    if not k:
        return np.full(DRAWS, model.node_mtbf_s), None
    rate_ratio = rng.gamma(k, 1.0 / k, DRAWS)  # true rate / estimated rate
    return model.node_mtbf_s / rate_ratio, (f"node MTBF: Poisson uncertainty of {k:,} counted failures "
                                            "(rate ~ Gamma(k), the exact chi-square interval)")


def _pct(values: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def headline(measured: Measured, model: FailureModel, tau: float, which: str, work_s: float, gpus_per_node: int,
             price: float | None, seed: int) -> Headline:
    """The expected lost hours at ``tau`` with the 95% interval the inputs' uncertainty gives it."""
    rng = np.random.default_rng(seed + 1)
    c, n = measured.checkpoint_cost_s, model.nodes
    r_draws, r_cover = _recovery_draws(measured, n, rng)
    m_draws, m_cover = _mtbf_draws(model, rng)
    c_draws, c_cover = _save_draws(measured, rng)
    covers = tuple(x for x in (r_cover, m_cover, c_cover) if x)
    exact = []
    if r_cover is None:
        exact.append("recovery R (" + ("one value: its spread is not known" if len(measured.recovery_samples) < 2
                                       else "supplied") + ")")
    if m_cover is None:
        exact.append("node MTBF (supplied as one value)")
    if measured.recovery_origin.startswith("extrapolated") and measured.recovery_fit and measured.recovery_fit.tie:
        exact.append(f"the growth law ({measured.recovery_fit.law}: the data do not choose it over "
                     f"{measured.recovery_fit.other_law})")
    if c_cover is None:
        exact.append("checkpoint cost C")
    exact += ["checkpoint interval τ", "node count N"]
    point_wall = float(expected_wall(work_s, tau, c, measured.recovery_s, model.job_mtbf_s))
    walls = expected_wall(work_s, tau, c_draws, r_draws, m_draws / n)
    lost = (walls - work_s) / HOUR
    ettrs = work_s / walls
    job_lost, skipped = [], 0
    for i in range(min(JOB_DRAWS, DRAWS)):
        try:
            sim = simulate(work_s, tau, float(c_draws[i]), float(r_draws[i]), float(m_draws[i]) / n, 1, rng)
        except ProjectionError:
            skipped += 1
            continue
        job_lost.append(float(sim.wall[0] - work_s) / HOUR)
    finite = lost[np.isfinite(lost)]
    lost_h = (point_wall - work_s) / HOUR
    gpus = n * gpus_per_node
    lost_95 = _pct(finite)
    return Headline(interval_s=tau, which=which, lost_hours=lost_h, ettr=work_s / point_wall, lost_hours_95=lost_95,
                    ettr_95=_pct(ettrs), job_lost_hours_95=_pct(np.array(job_lost)) if job_lost else (math.nan,) * 2,
                    covers=covers, exact=tuple(exact), nodes=n, gpus_per_node=gpus_per_node, gpu_hours=lost_h * gpus,
                    gpu_hours_95=(lost_95[0] * gpus, lost_95[1] * gpus), price_per_gpu_hour=price, draws=DRAWS,
                    skipped_draws=skipped)


def sensitivity(measured: Measured, model: FailureModel, tau: float, work_s: float) -> list[SensitivityRow]:
    """The headline (closed form) with each input ×0.5 and ×2, the others unchanged."""
    c, r, m_node, n = measured.checkpoint_cost_s, measured.recovery_s, model.node_mtbf_s, model.nodes
    fit = measured.recovery_fit if measured.recovery_origin.startswith("extrapolated") else None

    def at(c: float = c, r: float = r, m_node: float = m_node, tau: float = tau, n: float = n) -> tuple[float, float]:
        wall = float(expected_wall(work_s, tau, c, r, m_node / n))
        return (wall - work_s) / HOUR, work_s / wall

    def row(name: str, value: float, unit: str, results: list[tuple[float, float]], note: str = "") -> SensitivityRow:
        return SensitivityRow(name, value, unit, tuple(x[0] for x in results), tuple(x[1] for x in results), note)

    rows = [row("recovery R", r, "s", [at(r=r * f) for f in FACTORS]),
            row("checkpoint cost C", c, "s", [at(c=c * f) for f in FACTORS]),
            row("node MTBF", m_node / HOUR, "h", [at(m_node=m_node * f) for f in FACTORS]),
            row("checkpoint interval τ", tau, "s", [at(tau=tau * f) for f in FACTORS])]
    if fit is not None:
        rows.append(row("nodes N (R follows the fit)", n, "nodes",
                        [at(n=n * f, r=max(fit.at(max(1, round(n * f))), 0.0)) for f in FACTORS],
                        "more nodes: more failures, and each recovery as the fit extrapolates"))
    else:
        rows.append(row("nodes N", n, "nodes", [at(n=n * f) for f in FACTORS], "R held as is"))
    return rows
