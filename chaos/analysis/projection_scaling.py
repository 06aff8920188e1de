"""How recovery (and its rendezvous phase) grows with the node count, fitted from runs at several node counts.

One run measures recovery at its own size only; a reviewer asks what it is at 1,024 nodes. With runs at several
node counts (``chaos project RUN2 RUN4 RUN8 --nodes 1024``) each restarted fault is a point (N, seconds) and two
growth laws with two parameters are fitted by least squares: ``a + b·ln N`` (tree-like collectives, a store that
answers in log time) and ``a + b·N`` (anything that visits every node). The one with the smaller residual is
used, the residual (RMS, seconds, over n − 2 degrees of freedom) is printed, and the value at the projected N is an
*extrapolation*: the runs' node counts bound what was measured. With only two node counts both laws pass through the
two groups' means equally well: nothing in the data chooses, so ``ln N`` is used and what ``N`` would give is
printed beside it. The standard error of the fitted mean recovery at the projected N (OLS, s·√(x₀ᵀ(XᵀX)⁻¹x₀): it
grows with the distance of ln N or N from the runs') feeds the projection's interval, which is about the expected
lost time, so about the mean recovery; with only two points there is no residual to estimate it from, and that is
said rather than hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LAWS = {"a + b·ln N": math.log, "a + b·N": float}


@dataclass(frozen=True)
class GrowthFit:
    """One growth law fitted to (node count, seconds) points."""

    what: str  # "recovery" or "rendezvous"
    law: str  # a key of LAWS
    a: float
    b: float
    residual_s: float | None  # RMS over n − 2 degrees of freedom; None with two points (an exact fit)
    other_law: str
    other_residual_s: float | None
    other_ab: tuple[float, float]
    tie: bool  # fewer than three node counts, or equal residuals: the data do not choose between the laws
    points: tuple[tuple[int, float], ...]
    xtx_inv: tuple[tuple[float, float], tuple[float, float]]

    def at(self, nodes: int) -> float:
        return self.a + self.b * LAWS[self.law](nodes)

    def other_at(self, nodes: int) -> float:
        return self.other_ab[0] + self.other_ab[1] * LAWS[self.other_law](nodes)

    def mean_se(self, nodes: int) -> float | None:
        """Standard error of the fitted mean recovery at ``nodes`` (None when the residual is unknown)."""
        if self.residual_s is None:
            return None
        x = np.array([1.0, LAWS[self.law](nodes)])
        return self.residual_s * math.sqrt(float(x @ np.array(self.xtx_inv) @ x))

    @property
    def node_counts(self) -> list[int]:
        return sorted({n for n, _ in self.points})

    def describe(self, nodes: int) -> str:
        counts = self.node_counts
        residual = (f"residual {self.residual_s:.3g} s RMS over {len(self.points)} points"
                    if self.residual_s is not None
                    else f"an exact fit through {len(self.points)} points: no residual to judge it by")
        if self.tie:
            other = (f"; {self.other_law} fits these {len(counts)} node counts as well, so the data do not choose the "
                     f"law: it would give {self.other_at(nodes):.3g} s at N = {nodes:,}")
        else:
            other = f"; {self.other_law} fitted worse (residual {self.other_residual_s:.3g} s)"
        return (f"{self.what}_s(N) = {self.a:.3g} {'+' if self.b >= 0 else '−'} {abs(self.b):.3g}"
                f"{'·ln N' if 'ln' in self.law else '·N'} ({residual}{other}), fitted on N = "
                f"{', '.join(map(str, counts))}; at N = {nodes:,} = {self.at(nodes):.3g} s, an EXTRAPOLATION "
                f"{nodes / max(counts):,.0f}× beyond the largest run")


def _lstsq(points: list[tuple[int, float]], law: str) -> tuple[float, float, float, np.ndarray]:
    x = np.array([[1.0, LAWS[law](n)] for n, _ in points])
    y = np.array([v for _, v in points])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rss = float(((x @ coef - y) ** 2).sum())
    return float(coef[0]), float(coef[1]), rss, np.linalg.inv(x.T @ x)


def fit_growth(what: str, points: list[tuple[int, float]]) -> GrowthFit | None:
    """The better of the two laws on ``points``; None with fewer than two distinct node counts."""
    if len({n for n, _ in points}) < 2:
        return None
    fits = {law: _lstsq(points, law) for law in LAWS}
    dof = len(points) - 2
    counts = len({n for n, _ in points})
    rss = {law: fits[law][2] for law in LAWS}
    tie = counts < 3 or math.isclose(*rss.values(), rel_tol=1e-9, abs_tol=1e-12)
    best = "a + b·ln N" if tie else min(fits, key=lambda law: rss[law])
    other = next(law for law in LAWS if law != best)

    def rms(rss: float) -> float | None:
        return math.sqrt(rss / dof) if dof > 0 else None

    a, b, rss, inv = fits[best]
    return GrowthFit(what=what, law=best, a=a, b=b, residual_s=rms(rss), other_law=other,
                     other_residual_s=rms(fits[other][2]), other_ab=(fits[other][0], fits[other][1]), tie=tie,
                     points=tuple(points),
                     xtx_inv=((float(inv[0, 0]), float(inv[0, 1])), (float(inv[1, 0]), float(inv[1, 1]))))
