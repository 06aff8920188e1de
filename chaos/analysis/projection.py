"""Projection to scale: what a run's measured recovery and checkpoint cost mean for a job on N nodes.

A small run measures what one failure costs (``recovery_s``: fault → first step of the restarted job; the work
since the newest checkpoint is redone after that) and what one checkpoint costs (median blocking save). At scale
the question is how often failures come. The failure model here is the classic one:

- every node fails independently, with exponentially distributed times between failures of mean ``m_node``
  (the node MTBF), so the job, which stops when any of its N nodes fails, sees failures at rate N / m_node:
  job MTBF ``M = m_node / N``;
- the job checkpoints after every τ seconds of useful work, each save blocks training for C seconds;
- a failure (at any moment: during work, a save or a restart) loses the work and the save in progress since
  the last completed checkpoint, then costs a restart of R seconds, which a failure can interrupt too (it is
  then started again); the job resumes from the newest completed checkpoint.

Under that model the expected wall time has a closed form (Daly 2006, eq. for T_w, exact for exponential
failures): a segment of s = τ + C seconds finishes after ``M·e^{R/M}·(e^{s/M} − 1)`` seconds on average, so the
effective training time ratio (useful / wall) is ``τ / (M·e^{R/M}·(e^{(τ+C)/M} − 1))``. For τ, C, R ≪ M it is
Young's first order ``1 − C/τ − (τ + C)/(2M) − R/M`` (Young 1974), minimised at τ = √(2CM); Daly's higher-order
optimum is in ``chaos.analysis.interval``. The Monte Carlo (:func:`simulate`) draws the failures and restarts
of that model and is checked against the closed form (``tests/test_projection.py``); it also gives the spread
of a job's lost time, which the closed form does not.

Everything here is computation; ``chaos project`` and the reports' "Projection to scale" section present it.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from chaos.analysis.interval import daly, save_costs, young
from chaos.analysis.load import load_events
from chaos.analysis.projection_incidents import IncidentError, read_incidents
from chaos.analysis.projection_math import (
    MAX_DRAWS,
    ProjectionError,
    Simulation,
    daly_wall_s,
    simulate,
    young_ratio,
)
from chaos.analysis.projection_presets import DAY, HOUR, PRESETS
from chaos.analysis.projection_scaling import fit_growth
from chaos.analysis.projection_uncertainty import headline, sensitivity
from chaos.paths import shown
from chaos.spec import parse_duration
from chaos.workload import ShippedWorkload

if TYPE_CHECKING:
    from chaos.analysis.projection_incidents import IncidentHistory
    from chaos.analysis.projection_scaling import GrowthFit
    from chaos.analysis.projection_uncertainty import Headline, SensitivityRow
    from chaos.analysis.result_model import FaultResult
    from chaos.analysis.run import RunAnalysis

Z95 = 1.96  # normal quantile of a two-sided 95% interval
FIRST_ORDER_LIMIT = 0.1  # (τ + C)/M and R/M below this: Young's first-order terms are "small" (stated, not hidden)
NEAR_BEST = 0.001  # ETTR within 0.1 point of the best: the range of intervals as good as the best, in practice
MAX_TRIALS = 100_000  # Monte Carlo jobs per interval: beyond it, memory for nothing (the CIs are already tight)


# Where each input came from, printed beside its value: a reviewer must not read a supplied or assumed figure as a
# measurement, nor a toy run's figure as one taken at scale.
MEASURED = "measured here"
SUPPLIED = "supplied"
ASSUMED = "assumed"
EXTRAPOLATED = "extrapolated from runs measured here"


def parse_duration_s(value: str, option: str) -> float:
    """``10000h``, ``30m``, ``2d``, ``45`` (seconds) → seconds > 0; else a ProjectionError naming ``option``."""
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        raise ProjectionError(f"{option}: expected a duration such as 10000h, 30m, 2d or 45s, got {value!r}") from None
    if not seconds > 0 or not math.isfinite(seconds):
        raise ProjectionError(f"{option}: must be a positive duration, got {value!r}")
    if not MIN_DURATION_S <= seconds <= MAX_DURATION_S:
        raise ProjectionError(f"{option}: {value!r} is outside what a projection computes with (1 ms to 100 "
                              "years)")
    return seconds


# The range of durations and job lengths the projection's arithmetic stays exact in: beyond it the failure counts
# and intervals overflow or vanish (measured: --mtbf-node 1e-300s overflowed, --job-days 1e-300 divided by zero).
MIN_DURATION_S = 1e-3
MAX_DURATION_S = 100 * 365 * 86400.0
MIN_JOB_DAYS, MAX_JOB_DAYS = 1e-3, 100 * 365.0


# --------------------------------------------------------------------------------------------------------------
# Failure model


@dataclass(frozen=True)
class FailureModel:
    """Independent exponential node failures; the job stops at any node's failure: M = node MTBF / N."""

    nodes: int
    node_mtbf_s: float
    source: str  # "--mtbf-node 10000h", "preset llama3" or "incidents.csv"
    derivation: tuple[str, ...] = ()
    origin: str = SUPPLIED  # SUPPLIED (an option, an incident CSV) or ASSUMED (a preset)
    failures_counted: int | None = None  # the count the MTBF rests on (its Poisson uncertainty); None: exact

    @property
    def job_mtbf_s(self) -> float:
        return self.node_mtbf_s / self.nodes


ONE_RATE = ("give exactly one failure rate: --mtbf-node DURATION (per-node mean time between failures, e.g. "
            f"10000h), --incidents FILE.csv (your failure history) or --preset NAME ({', '.join(sorted(PRESETS))})")


def failure_model(nodes: int, mtbf_node: str | None = None, preset: str | None = None,
                  incidents: IncidentHistory | None = None) -> FailureModel:
    """The model for ``--nodes`` and exactly one of ``--mtbf-node`` / ``--preset`` / ``--incidents``."""

    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ProjectionError(f"--nodes: must be a whole number of nodes ≥ 1, got {nodes!r}")
    if sum(x is not None for x in (mtbf_node, preset, incidents)) != 1:
        raise ProjectionError(ONE_RATE)
    if incidents is not None:
        if not MIN_DURATION_S <= incidents.node_mtbf_s <= MAX_DURATION_S:
            raise ProjectionError(f"--incidents {shown(incidents.path)}: a node MTBF of {incidents.node_mtbf_s:.3g} s "
                                  "is outside what a projection computes with (1 ms to 100 years)")
        return FailureModel(nodes, incidents.node_mtbf_s, f"--incidents {shown(incidents.path)}",
                            tuple(incidents.derivation()), SUPPLIED, incidents.failures_counted)
    if preset is not None:
        if preset not in PRESETS:
            raise ProjectionError(f"--preset: unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
        p = PRESETS[preset]
        return FailureModel(nodes, p.node_mtbf_s, f"preset {p.name}", tuple(p.derivation()), ASSUMED, p.interruptions)
    assert mtbf_node is not None
    return FailureModel(nodes, parse_duration_s(mtbf_node, "--mtbf-node"), f"--mtbf-node {mtbf_node}")


# --------------------------------------------------------------------------------------------------------------
# What the run measured


@dataclass(frozen=True)
class LostWork:
    """What one restarted fault of the run lost: the steps trained again and their time, and where it resumed."""

    fault: int
    lost_steps: int | None
    lost_work_s: float | None
    resumed_from: int | None


@dataclass(frozen=True)
class Measured:
    """The run's figures the projection rests on, each with where it came from."""

    run_dir: str
    run_nodes: int
    recovery_s: float
    recovery_source: str
    checkpoint_cost_s: float
    checkpoint_cost_source: str
    step_s: float | None  # median step time of the run
    interval_s: float | None  # the job's checkpoint interval (seconds of training between saves), if known
    interval_source: str
    lost: tuple[LostWork, ...] = ()  # per restarted fault
    lost_check: str = ""  # whether the run's losses match "resume from the newest checkpoint"
    recovery_origin: str = SUPPLIED  # MEASURED, SUPPLIED or EXTRAPOLATED
    checkpoint_cost_origin: str = SUPPLIED
    step_origin: str = MEASURED
    interval_origin: str = SUPPLIED
    recovery_samples: tuple[float, ...] = ()  # what R's spread is known from (restarts, or incident downtimes)
    recovery_samples_of: str = "restarts"
    save_samples: tuple[float, ...] = ()  # every measured save (C is their median): its spread
    recovery_fit: GrowthFit | None = None  # recovery_s(N) from runs at several node counts, if given
    rendezvous_fit: GrowthFit | None = None
    scaling_note: str = ""  # how R relates to the projected node count: extrapolated, or taken at the run's size


def measured_inputs(analysis: RunAnalysis, checkpoint_cost: str | None = None, recovery: str | None = None,
                    checkpoint_interval: str | None = None, step: str | None = None,
                    scaling: tuple[RunAnalysis, ...] = (), incidents: IncidentHistory | None = None,
                    nodes: int | None = None) -> Measured:
    """R, C, step time and the current interval, each labelled measured here / supplied / extrapolated.

    R: ``--recovery-s`` (supplied), else the incident history's mean downtime (supplied), else a growth law fitted
    on the runs at several node counts (``scaling``, which include ``analysis``) and extrapolated to ``nodes``,
    else the mean over this run's restarts (measured here, at the run's own size: flagged)."""

    result = analysis.model
    run_nodes = analysis.scenario.cluster.nodes
    restarted = [f for f in result.faults if f.restarted and f.recovery_s is not None]
    runs = (analysis, *[a for a in scaling if a is not analysis])
    points = [(a.scenario.cluster.nodes, f.recovery_s) for a in runs for f in a.model.faults
              if f.restarted and f.recovery_s is not None]
    rendezvous = [(a.scenario.cluster.nodes, s) for a in runs for f in a.model.faults if f.restarted
                  for s in [_phase_s(f, "rendezvous")] if s is not None]
    fit = fit_growth("recovery", points) if len(runs) > 1 else None
    rdzv_fit = fit_growth("rendezvous", rendezvous) if len(runs) > 1 else None
    if len(runs) > 1 and fit is None:
        raise ProjectionError(f"{len(runs)} runs given, but their restarts are all at N = "
                              f"{', '.join(sorted({str(n) for n, _ in points})) or '(none)'} node(s): fitting how "
                              "recovery grows with N needs restarts measured at two node counts at least")
    samples: tuple[float, ...] = tuple(f.recovery_s for f in restarted if f.recovery_s is not None)
    samples_of = f"restart(s) of {shown(analysis.run_dir)}"
    target = nodes or run_nodes
    if recovery is not None:
        r = parse_duration_s(recovery, "--recovery-s")
        r_origin, r_source = SUPPLIED, f"--recovery-s {recovery}"
        if samples:
            r_source += f"; measured here on {run_nodes} node(s): {_seconds(restarted)}"
        samples = ()
        scaling_note = "Recovery R is supplied (--recovery-s) and taken as the recovery at the projected size"
    elif incidents is not None and incidents.downtimes_s:
        r = incidents.mean_downtime_s or 0.0
        r_origin = SUPPLIED
        r_source = f"mean downtime of {len(incidents.downtimes_s)} failure(s) in --incidents {shown(incidents.path)}"
        samples, samples_of = incidents.downtimes_s, "incident downtimes"
        scaling_note = ("Recovery R is the mean downtime of the team's incident history (their job's scale), not "
                        "this run's")
    elif fit is not None:
        r = fit.at(target)
        if not r > 0:
            raise ProjectionError(f"the fit {fit.law} of recovery against N falls to {r:.3g} s at {target:,} nodes: "
                                  "the runs do not say how recovery grows; give --recovery-s DURATION")
        mixed = _mixed_jobs(runs)
        r_origin, r_source = EXTRAPOLATED, fit.describe(target) + mixed
        samples, samples_of = tuple(v for _, v in points), "restarts of the runs"
        scaling_note = (f"Recovery R is extrapolated by a fit on runs at N = {', '.join(map(str, fit.node_counts))} "
                        f"to {target:,} nodes: an extrapolation, not a measurement at that size{mixed}")
    elif restarted:
        r = sum(samples) / len(samples)
        r_origin = MEASURED
        r_source = (f"mean recovery_s of {len(restarted)} restart(s) on {run_nodes} node(s) ({_seconds(restarted)})"
                    + ("" if target == run_nodes else f", taken as is at {target:,} nodes"))
        scaling_note = ("" if target == run_nodes else
                        f"FLAG: recovery is taken as measured at the run's own size ({run_nodes} node(s)), not at "
                        f"{target:,}: give runs at several node counts (chaos project RUN2 RUN4 RUN8 ...) to fit "
                        "its growth, or --recovery-s")
    else:
        raise ProjectionError(f"{analysis.run_dir}: this run measured no recovery (no fault restarted the job and "
                              "reached a step after it), so it says nothing about what a failure costs; project a run "
                              "with a recovered crash, or give --recovery-s DURATION")

    save_samples: tuple[float, ...] = ()
    if checkpoint_cost is not None:
        c = parse_duration_s(checkpoint_cost, "--save-s")
        c_origin, c_source = SUPPLIED, f"--save-s {checkpoint_cost}"
        if analysis.save_cost_s is not None:
            c_source += f"; measured here: median save {analysis.save_cost_s * 1000:.1f} ms"
    elif analysis.save_cost_s is not None and analysis.save_cost_s > 0:
        c = analysis.save_cost_s
        c_origin = MEASURED
        save_samples = _save_samples(analysis)
        c_source = (f"median checkpoint save on {run_nodes} node(s) (checkpoint_save_started → "
                    "checkpoint_save_finished, the job's own events, else the storage layer's)"
                    + ("" if target == run_nodes else f", taken as is at {target:,} nodes and the model size of "
                       "this run: --save-s gives yours"))
    else:
        raise ProjectionError(f"{analysis.run_dir}: checkpoint cost not measured (no checkpoint_save_started/"
                              "finished pair in the history); give --save-s DURATION")

    step_s, step_origin = result.median_step_s, MEASURED
    if step is not None:
        step_s, step_origin = parse_duration_s(step, "--step-s"), SUPPLIED
    every = None
    if isinstance(analysis.scenario.workload, ShippedWorkload):
        every = int(analysis.scenario.workload.args.get("checkpoint_every", 25))
    interval, i_source = _interval(checkpoint_interval, every, step_s)
    i_origin = SUPPLIED if checkpoint_interval is not None or step is not None else MEASURED
    lost = tuple(LostWork(f.id, f.lost_steps, f.lost_work_s, f.resumed_from) for f in restarted)
    return Measured(run_dir=str(analysis.run_dir), run_nodes=run_nodes, recovery_s=r,
                    recovery_source=r_source, checkpoint_cost_s=c, checkpoint_cost_source=c_source, step_s=step_s,
                    interval_s=interval, interval_source=i_source, lost=lost, lost_check=_lost_check(lost, every),
                    recovery_origin=r_origin, checkpoint_cost_origin=c_origin, step_origin=step_origin,
                    interval_origin=i_origin, recovery_samples=samples, recovery_samples_of=samples_of,
                    recovery_fit=fit, rendezvous_fit=rdzv_fit, scaling_note=scaling_note, save_samples=save_samples)


def _save_samples(analysis: RunAnalysis) -> tuple[float, ...]:
    """Every save's cost in the run (the analysis keeps only their median); none if the history cannot be read."""

    try:
        return tuple(save_costs(load_events(analysis.run_dir / "events.jsonl")))
    except (OSError, ValueError):
        return ()


def _mixed_jobs(runs: tuple[RunAnalysis, ...]) -> str:
    """A warning when the runs fitted together are not the same job (mode, workload): their recoveries differ for
    reasons other than the node count, and the fit would blame N for it."""
    modes = sorted({a.scenario.cluster.mode for a in runs})
    workloads = sorted({a.scenario.workload.model_dump_json(exclude={"args"}) for a in runs})
    if len(modes) == 1 and len(workloads) == 1:
        return ""
    what = [f"modes {' and '.join(modes)}"] if len(modes) > 1 else []
    what += [f"{len(workloads)} different workloads"] if len(workloads) > 1 else []
    return (f"; WARNING: the runs are not the same job ({', '.join(what)}), so the fit mixes differences between "
            "jobs with growth in N")


def _phase_s(fault: FaultResult, phase: str) -> float | None:
    """One phase of a fault's recovery breakdown (result.json's ``recovery_breakdown``), if measured."""
    breakdown = fault.extra.get("recovery_breakdown") or {}
    return next((float(p["seconds"]) for p in breakdown.get("phases", [])
                 if p.get("phase") == phase and isinstance(p.get("seconds"), (int, float))), None)


def _seconds(faults: list[FaultResult]) -> str:
    return ", ".join(f"{f.recovery_s:.2f} s" for f in faults if f.recovery_s is not None)


def _interval(option: str | None, every: int | None, step: float | None) -> tuple[float | None, str]:
    """``--checkpoint-interval 30m`` or ``200steps``; else the shipped workload's checkpoint_every × step time."""
    if option is not None:
        m = re.match(r"^\s*(\d+)\s*steps?\s*$", option)
        if m:
            if not step:
                raise ProjectionError("--checkpoint-interval: given in steps, but this run has no median step "
                                      "time; give a duration such as 30m")
            n = int(m.group(1))
            if n < 1:
                raise ProjectionError(f"--checkpoint-interval: must be ≥ 1 step, got {option!r}")
            return n * step, f"--checkpoint-interval {option} × step time {step:.4f} s"
        return parse_duration_s(option, "--checkpoint-interval"), f"--checkpoint-interval {option}"
    if every and step:
        return every * step, f"the run's checkpoint_every {every} steps × step time {step:.4f} s"
    return None, "not known (the workload is not a shipped one): give --checkpoint-interval to project it"


def _lost_check(lost: tuple[LostWork, ...], every: int | None) -> str:
    """The model resumes from the newest checkpoint: at most one interval lost per failure. Did the run?"""
    if not lost or every is None:
        return "not checked: " + ("no restart measured" if not lost else "checkpoint interval in steps not known")
    worst = max((f.lost_steps or 0) for f in lost)
    if worst <= every:
        return (f"lost at most {worst} step(s) per restart ≤ checkpoint_every {every}: consistent with resuming "
                "from the newest checkpoint, as the model assumes")
    return (f"lost {worst} steps in one restart > checkpoint_every {every}: the run resumed from an older "
            "checkpoint than the newest, so the model (newest checkpoint) understates the lost work")


# --------------------------------------------------------------------------------------------------------------
# Closed forms


@dataclass(frozen=True)
class IntervalFigures:
    """One checkpoint interval's projection: Monte Carlo figures beside the closed forms."""

    interval_s: float
    ettr: float  # useful / expected wall (Monte Carlo)
    ettr_ci95: tuple[float, float]  # from the 95% interval of the mean wall time
    ettr_p5_p95: tuple[float, float]  # spread of single jobs' ratio
    ettr_closed_form: float  # Daly's exact expected-value form
    ettr_young: float  # Young's first order
    first_order_applies: bool  # (τ + C)/M and R/M both < FIRST_ORDER_LIMIT
    wall_days: float
    lost_hours: float  # wall − useful, expected
    lost_hours_p95: float
    lost_hours_per_day: float  # per wall-clock day
    lost_node_hours: float
    checkpoint_hours: float
    rework_hours: float
    wasted_save_hours: float
    recovery_hours: float
    failures: float

    @classmethod
    def of(cls, sim: Simulation, tau: float, c: float, r: float, m: float, nodes: int) -> IntervalFigures:
        wall = sim.wall
        trials = len(wall)
        mean = float(wall.mean())
        half = Z95 * float(wall.std(ddof=1)) / math.sqrt(trials) if trials > 1 else 0.0
        ratios = sim.work_s / wall
        lost = wall - sim.work_s
        return cls(
            interval_s=tau, ettr=sim.work_s / mean,
            ettr_ci95=(sim.work_s / (mean + half), sim.work_s / max(mean - half, sim.work_s)),
            ettr_p5_p95=(float(np.percentile(ratios, 5)), float(np.percentile(ratios, 95))),
            ettr_closed_form=sim.work_s / daly_wall_s(sim.work_s, tau, c, r, m),
            ettr_young=young_ratio(tau, c, r, m),
            first_order_applies=(tau + c) / m < FIRST_ORDER_LIMIT and r / m < FIRST_ORDER_LIMIT,
            wall_days=mean / DAY, lost_hours=float(lost.mean()) / HOUR,
            lost_hours_p95=float(np.percentile(lost, 95)) / HOUR,
            lost_hours_per_day=float(lost.mean()) / mean * 24, lost_node_hours=float(lost.mean()) / HOUR * nodes,
            checkpoint_hours=float(sim.checkpointing.mean()) / HOUR, rework_hours=float(sim.rework.mean()) / HOUR,
            wasted_save_hours=float(sim.wasted_saves.mean()) / HOUR,
            recovery_hours=float(sim.recovery.mean()) / HOUR, failures=float(sim.failures.mean()))


@dataclass
class Projection:
    """The projection of one run to N nodes: inputs, model, per-interval figures and the best interval."""

    measured: Measured
    model: FailureModel
    job_days: float  # failure-free training time of the projected job
    trials: int
    seed: int
    current: IntervalFigures | None
    sweep: list[IntervalFigures]
    best: IntervalFigures
    near_best: tuple[float, float]  # smallest and largest swept interval within NEAR_BEST of the best ETTR
    young_s: float
    daly_s: float
    check: dict[str, Any] = field(default_factory=dict)  # Monte Carlo against the closed form, over the sweep
    runtime_s: float = 0.0
    assumptions: list[str] = field(default_factory=list)
    headline: Headline | None = None  # the answer at the current (else best) interval, with its real interval
    sensitivity: list[SensitivityRow] = field(default_factory=list)  # that answer with each input ×0.5, ×2

    def at(self, interval_s: float | None) -> IntervalFigures | None:
        """The sweep's figures for exactly this interval (the current one, Young's, Daly's), if swept."""
        return next((f for f in self.sweep if interval_s is not None and f.interval_s == interval_s), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["job_mtbf_s"] = self.model.job_mtbf_s
        return out


def assumptions(measured: Measured, model: FailureModel) -> list[str]:
    """The model's assumptions, printed beside its numbers."""
    return [
        f"node failures are independent and exponential (memoryless), per-node MTBF {model.node_mtbf_s / HOUR:,.0f} h "
        f"({model.source}); any node's failure stops the job: job MTBF = {model.node_mtbf_s / HOUR:,.0f} h / "
        f"{model.nodes:,} nodes = {model.job_mtbf_s / HOUR:.3g} h",
        f"every failure costs the recovery R = {measured.recovery_s:.3g} s ({measured.recovery_origin}"
        + (f" on {measured.run_nodes} node(s), taken as is at {model.nodes:,} nodes: not measured there; "
           "--recovery-s or runs at several node counts give another value"
           if measured.recovery_origin == MEASURED and model.nodes != measured.run_nodes else "")
        + "); the same for every failure; a failure during a restart starts it again",
        f"each checkpoint blocks training for C = {measured.checkpoint_cost_s:.3g} s ({measured.checkpoint_cost_origin}"
        + (f" on {measured.run_nodes} node(s) with this run's model size, taken as is at {model.nodes:,} nodes: "
           "--save-s gives the save time at your model size and storage bandwidth"
           if measured.checkpoint_cost_origin == MEASURED and model.nodes != measured.run_nodes else "")
        + "); a failure during a save loses it",
        "a restarted job resumes from the newest completed checkpoint: the training since then is redone "
        f"({measured.lost_check})",
        "training is continuous work (step granularity ignored); planned maintenance, stragglers, slowdowns and "
        "failures of the checkpoint storage are not modelled",
    ]


def closed_form_check(sweep: list[IntervalFigures]) -> dict[str, Any]:
    """How far the Monte Carlo's ETTR is from Daly's exact closed form over the sweep, and how often the closed
    form lies inside the Monte Carlo's 95% interval (about 95% of the intervals if both are right)."""
    diffs = [abs(f.ettr - f.ettr_closed_form) for f in sweep]
    inside = sum(f.ettr_ci95[0] <= f.ettr_closed_form <= f.ettr_ci95[1] for f in sweep)
    return {"intervals": len(sweep), "max_abs_difference": max(diffs), "closed_form_inside_ci95": inside}


def interval_grid(centre: float, extra: tuple[float | None, ...] = (), points_per_octave: int = 4,
                  octaves: int = 3) -> list[float]:
    """Intervals swept: a geometric grid around the closed-form optimum (±``octaves`` doublings), plus ``extra``
    (the current interval, Young's and Daly's optimum)."""
    grid = {centre * 2 ** (k / points_per_octave)
            for k in range(-octaves * points_per_octave, octaves * points_per_octave + 1)}
    grid.update(x for x in extra if x)
    return sorted(grid)


def project(measured: Measured, model: FailureModel, job_days: float = 30.0, trials: int = 1000,
            seed: int = 0, gpus_per_node: int = 8, price_per_gpu_hour: float | None = None) -> Projection:
    """Monte Carlo of a ``job_days`` job on ``model.nodes`` nodes at the current interval and over a sweep of
    intervals around Young/Daly's optimum; the best interval is the sweep's highest projected ETTR."""
    import time

    if not job_days > 0 or not math.isfinite(job_days):
        raise ProjectionError(f"--job-days: must be a positive number of days, got {job_days!r}")
    if not MIN_JOB_DAYS <= job_days <= MAX_JOB_DAYS:
        raise ProjectionError(f"--job-days: {job_days!r} is outside what a projection computes with "
                              f"({MIN_JOB_DAYS:g} to {MAX_JOB_DAYS:g} days)")
    if not 2 <= trials <= MAX_TRIALS:
        raise ProjectionError(f"--trials: must be from 2 to {MAX_TRIALS:,}, got {trials!r}")
    if seed < 0:
        raise ProjectionError(f"--seed: must be ≥ 0, got {seed!r}")
    if not isinstance(gpus_per_node, int) or not 1 <= gpus_per_node <= 1024:
        raise ProjectionError(f"--gpus-per-node: must be a whole number from 1 to 1024, got {gpus_per_node!r}")
    if price_per_gpu_hour is not None and not (math.isfinite(price_per_gpu_hour) and 0 <= price_per_gpu_hour <= 1e6):
        raise ProjectionError(f"--price-per-gpu-hour: must be a price from 0 to 1,000,000, got {price_per_gpu_hour!r}")
    start = time.perf_counter()
    c, r, m = measured.checkpoint_cost_s, measured.recovery_s, model.job_mtbf_s
    work = job_days * DAY
    y, d = young(c, m), daly(c, m)

    def figures(tau: float) -> IntervalFigures | None:
        try:
            sim = simulate(work, tau, c, r, m, trials, np.random.default_rng(seed))
        except ProjectionError:
            return None
        return IntervalFigures.of(sim, tau, c, r, m, model.nodes)

    sweep = [f for f in (figures(t) for t in interval_grid(d, (measured.interval_s, y, d))) if f is not None]
    if not sweep and max(c, r) >= m / 2:
        which = "recovery R" if r >= c else "checkpoint cost C"
        raise ProjectionError(f"the {which} ({max(c, r):.3g} s) is not far below the job's MTBF ({m:.3g} s = "
                              f"per-node MTBF / {model.nodes} nodes): the job barely progresses at any checkpoint "
                              f"interval, and {trials} jobs per interval would draw more than {MAX_DRAWS:,} failures; "
                              "check the recovery, checkpoint cost, MTBF and node count given (fewer trials or a "
                              "shorter job would let the projection finish, on a job that hardly trains)")
    if not sweep:
        raise ProjectionError(f"job MTBF {m:.3g} s (R = {r:.3g} s): even at the best interval a "
                              f"{job_days:g}-day job meets {work / m:.3g}+ failures; {trials} jobs per interval would "
                              f"draw more than {MAX_DRAWS:,} failures: give fewer --trials or a shorter --job-days "
                              "(when C or R is not far below the job MTBF, the job barely progresses at any interval)")
    best = max(sweep, key=lambda f: f.ettr)
    near = [f.interval_s for f in sweep if f.ettr >= best.ettr - NEAR_BEST]
    current = next((f for f in sweep if measured.interval_s is not None and f.interval_s == measured.interval_s),
                   None)
    proj = Projection(measured=measured, model=model, job_days=job_days, trials=trials, seed=seed, current=current,
                      sweep=sweep, best=best, near_best=(min(near), max(near)), young_s=y, daly_s=d,
                      check=closed_form_check(sweep), assumptions=assumptions(measured, model))

    at = current or best
    which = "the current interval" if current is not None else "the best interval in the sweep"
    proj.headline = headline(measured, model, at.interval_s, which, work, gpus_per_node, price_per_gpu_hour, seed)
    proj.sensitivity = sensitivity(measured, model, at.interval_s, work)
    proj.runtime_s = time.perf_counter() - start
    return proj


def project_run(analysis: RunAnalysis, nodes: int, mtbf_node: str | None = None, preset: str | None = None,
                job_days: float = 30.0, checkpoint_cost: str | None = None, recovery: str | None = None,
                checkpoint_interval: str | None = None, trials: int = 1000, seed: int = 0, step: str | None = None,
                incidents: str | None = None, incidents_nodes: int | None = None,
                scaling: tuple[RunAnalysis, ...] = (), gpus_per_node: int = 8,
                price_per_gpu_hour: float | None = None) -> Projection:
    """``chaos project`` / ``chaos report --project-nodes``: the run's measurements, the model, the projection.
    ``scaling``: more runs of the same job at other node counts, to fit recovery's growth with N."""

    history = None
    if incidents is not None and (mtbf_node is not None or preset is not None):
        raise ProjectionError(ONE_RATE)  # before reading the file: its errors would hide this one
    if incidents is not None:
        if incidents_nodes is not None and incidents_nodes < 1:
            raise ProjectionError(f"--incidents-nodes: must be a whole number of nodes ≥ 1, got {incidents_nodes!r}")
        try:
            history = read_incidents(incidents, incidents_nodes)
        except IncidentError as exc:
            raise ProjectionError(str(exc)) from None
    elif incidents_nodes is not None:
        raise ProjectionError("--incidents-nodes: only with --incidents FILE.csv (the node count of that history)")
    model = failure_model(nodes, mtbf_node, preset, history)
    measured = measured_inputs(analysis, checkpoint_cost, recovery, checkpoint_interval, step, scaling, history, nodes)
    return project(measured, model, job_days, trials, seed, gpus_per_node, price_per_gpu_hour)
