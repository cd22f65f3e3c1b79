"""A smoothed consistency over λ space: each trial's C replaced by a kernel-weighted average of
its neighbours' (docs/method.md §5), so that a pick rests on a region, not on one lucky estimate.

Nadaraya–Watson regression with a Gaussian kernel on λ scaled to the search range, shrunk towards
the mean of all trials C̄ by a prior weight κ (one pseudo-trial), so that a lone trial far from
the others — nothing to average it with — does not keep its lucky estimate:
    x_i = (λ_i − low) / (high − low),   w_j(x) = exp(−‖x − x_j‖² / 2h²),
    Ĉ(x) = (Σ_j w_j(x) C_j + κ C̄) / (Σ_j w_j(x) + κ),
with the bandwidth h chosen among BANDWIDTHS by leave-one-out squared error (the trial itself left
out), and a standard error se(x) = σ̂ · √(Σ_j w_j(x)²) / (Σ_j w_j(x) + κ), σ̂² the leave-one-out mean
squared residual. The surrogate is fitted to the complete trials after the search, whatever
sampler proposed them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["BANDWIDTHS", "Smoothed", "fit_smoother", "estimate"]

BANDWIDTHS = (0.04, 0.06, 0.09, 0.13, 0.18, 0.25, 0.35, 0.5)  # in units of the range's width
PRIOR = 1.0  # κ: the weight of C̄, one trial's worth


@dataclass(frozen=True)
class Smoothed:
    """The fitted surrogate: the scaled trial positions, their C, the bandwidth and σ̂."""

    x: tuple[tuple[float, ...], ...]
    c: tuple[float, ...]
    bandwidth: float
    sigma: float
    low: float
    high: float
    prior: float = 0.0  # C̄

    def scale(self, lams: Sequence[float]) -> tuple[float, ...]:
        width = (self.high - self.low) or 1.0
        return tuple((v - self.low) / width for v in lams)

    def at(self, lams: Sequence[float]) -> tuple[float, float]:
        """(Ĉ, se) at the λ vector `lams` (unscaled)."""
        return estimate(self.x, self.c, self.scale(lams), self.bandwidth, self.sigma, self.prior)


def weights(x: Sequence[Sequence[float]], at: Sequence[float], h: float, skip: int | None = None) -> list[float]:
    return [
        0.0 if j == skip else math.exp(-sum((a - b) ** 2 for a, b in zip(xj, at)) / (2 * h * h))
        for j, xj in enumerate(x)
    ]


def estimate(
    x: Sequence[Sequence[float]],
    c: Sequence[float],
    at: Sequence[float],
    h: float,
    sigma: float,
    prior: float,
    skip: int | None = None,
) -> tuple[float, float]:
    """(Ĉ, se) at the scaled point `at` (`skip`: a trial left out)."""
    w = weights(x, at, h, skip)
    total = sum(w) + PRIOR
    value = (sum(wj * cj for wj, cj in zip(w, c)) + PRIOR * prior) / total
    return value, sigma * math.sqrt(sum(wj * wj for wj in w)) / total


def loo_error(x: Sequence[Sequence[float]], c: Sequence[float], h: float, prior: float) -> float:
    """Mean squared leave-one-out residual of bandwidth h."""
    return sum((c[i] - estimate(x, c, xi, h, 0.0, prior, skip=i)[0]) ** 2 for i, xi in enumerate(x)) / len(x)


def fit_smoother(lams: Sequence[Sequence[float]], c: Sequence[float], low: float, high: float) -> Smoothed:
    """The surrogate of C over the trials' λ vectors (each trial's λ flattened, in one order)."""
    if not lams:
        raise ValueError("no trial to smooth")
    width = (high - low) or 1.0
    x = tuple(tuple((v - low) / width for v in row) for row in lams)
    cs = tuple(float(v) for v in c)
    mean = sum(cs) / len(cs)
    if len(x) < 3:  # too few to cross-validate: the narrowest kernel
        return Smoothed(x, cs, BANDWIDTHS[0], 0.0, low, high, mean)
    errors = {h: loo_error(x, cs, h, mean) for h in BANDWIDTHS}
    h = min(BANDWIDTHS, key=lambda b: (errors[b], b))
    return Smoothed(x, cs, h, math.sqrt(errors[h]), low, high, mean)
