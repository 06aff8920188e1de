"""How far a faulted run's losses may stray from the golden run's: the measured noise of a clean resume.

A stock DDP script is not bitwise reproducible across a restart: its gradient buckets are rebuilt after the
first step of every new process, so the step after a resume sums gradients in another order and the loss moves in
its last bits (~1e-7 relative at the first differing step, growing to ~1e-6 over the next hundred steps), while
real resume bugs (optimizer state not restored, an off-by-one resume, RNG state not restored) move it by 1e-2 and
more. Assuming zero noise calls every correct stock-DDP resume ``diverged``; guessing a tolerance hides small bugs
on some jobs and cries wolf on others. So the noise is measured: a *control run* (the golden job, resumed once at
the faulted run's resume step with nothing lost, same world size) diverges from the golden run by exactly the
noise a clean resume of this script introduces. The faulted run passes when its divergence stays within a band
around that floor:

    band = clamp(BAND_FACTOR x measured floor, BAND_FLOOR, BAND_CEILING)

The constants come from measurements on ``tests/byo/plain_ddp.py`` (docs/design.md, "Metric definitions").
Pure functions on loss tables: the checkers (chaos.analysis.checkpoints) and the golden cache use them.
"""

from __future__ import annotations

from dataclasses import dataclass

# A correct resume from the same checkpoint as the control is deterministic (same summation orders), so it
# reproduces the control's losses exactly; the factor leaves room for a run that resumed more than once.
BAND_FACTOR = 10.0
# A control that happened to stay bitwise (the rounding absorbed the reordering) still leaves this much room.
BAND_FLOOR = 1e-6
# Above this no noise band reaches: the smallest real resume bug measured moved the loss by ~1e-2. A faulted run
# further from the golden run than this is diverged without a control run.
BAND_CEILING = 1e-3
# The tolerance when the world size changed (every sum changes order, at every step) and none is pinned.
CHANGED_WORLD_RTOL = 1e-3


def band(measured_floor: float) -> float:
    """The relative loss difference a faulted run may show, given a clean resume's measured one."""
    return min(max(BAND_FACTOR * measured_floor, BAND_FLOOR), BAND_CEILING)


@dataclass
class LossComparison:
    """Per-step relative differences between a run's losses and the golden run's, over the steps both have."""

    steps: list[int]
    rel: list[float]  # |loss - golden| / |golden| (golden taken as at least 1e-12)
    abs: list[float]

    @property
    def max_rel(self) -> float:
        return max(self.rel, default=0.0)

    @property
    def max_abs(self) -> float:
        return max(self.abs, default=0.0)

    def first_above(self, tolerance: float) -> int | None:
        """The first step whose relative difference exceeds ``tolerance`` (0: the first that differs at all)."""
        return next((s for s, r in zip(self.steps, self.rel, strict=True) if r > tolerance), None)

    def rel_at(self, step: int) -> float:
        return self.rel[self.steps.index(step)]


def compare_losses(losses: dict[int, float], golden: dict[int, float]) -> LossComparison:
    steps = sorted(set(losses) & set(golden))
    abs_diffs = [abs(losses[s] - golden[s]) for s in steps]
    rel = [d / max(abs(golden[s]), 1e-12) for s, d in zip(steps, abs_diffs, strict=True)]
    return LossComparison(steps, rel, abs_diffs)


def int_losses(summary_losses: dict[str, float]) -> dict[int, float]:
    """A summary's ``losses`` (JSON keys are strings) by step number."""
    return {int(k): v for k, v in summary_losses.items()}
