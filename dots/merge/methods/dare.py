"""`dare` (Yu et al. 2024, DARE): random drop and rescale, then combine.

Each entry of each τ_i is dropped with probability p (default 0.9; DoTS used 0.1, SAR
0.2/0.9), survivors are rescaled by 1/(1−p); then `combine: linear` gives task
arithmetic λ·Σ_i w_i·τ'_i and `combine: ties` the TIES sign election + disjoint mean
(no trimming: DARE is the sparsifier), both scaled by λ (`scale`, default 1.0).
Masks come from generators seeded by `name_seed` of (tensor name, source index, block)
and `seed` (see `dots.merge.methods.base.drop_mask`), so merges are reproducible and order-independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.merge.methods.base import Part, check_choice, check_probability, dare_drop, disjoint_mean, weighted_sum
from dots.merge.methods.declare import merge_method

COMBINES = ("linear", "ties")


@dataclass(frozen=True)
class DareOptions:
    p: float = 0.9
    combine: str = "linear"
    scale: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_probability(self.p, "method.p")
        check_choice(self.combine, COMBINES, "method.combine")


@merge_method("dare", DareOptions, blockwise=True, summary="random drop p, rescale 1/(1-p), combine linear|ties")
def dare(
    name: str, deltas: list[torch.Tensor], weights: Sequence[float], options: DareOptions, part: Part
) -> torch.Tensor:
    """τ'_i = τ_i ⊙ m_i / (1 − p) with m_i ~ Bernoulli(1 − p) keyed by (name, i, seed); then
    combine linear: λ·Σ_i w_i·τ'_i, or ties: λ·(sign election + disjoint mean of the τ'_i)."""
    dropped = dare_drop(deltas, float(options.p), name, int(options.seed), part)
    if options.combine == "ties":
        merged = disjoint_mean(dropped, weights)
    else:
        merged = weighted_sum(dropped, weights)
    return merged.mul_(float(options.scale))
