"""`ties` (Yadav et al. 2023, TIES-Merging): trim, elect sign, disjoint mean.

Per task vector keep the top `density` fraction (default 0.2) of entries by |τ_i|
(per tensor, exactly k = round(density·n), ties to lower flat indices), elect the sign
of Σ_i w_i·τ̂_i per entry, average only the kept non-zero entries that agree with it,
scale by λ (`scale`, default 1.0). Unit weights give the paper's method.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.methods.base import Method, check_density, disjoint_mean, keep_only, topk_magnitude_mask
from dots.methods.registry import register


@dataclass(frozen=True)
class TiesOptions:
    density: float = 0.2
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_density(self.density)


def trim(deltas: list[torch.Tensor], density: float) -> list[torch.Tensor]:
    """Zero all but the top-`density` entries of each τ_i by magnitude, in place."""
    if density < 1.0:
        for delta in deltas:
            keep_only(delta, topk_magnitude_mask(delta, density))
    return deltas


def merge(name: str, base: torch.Tensor, deltas: list[torch.Tensor], weights: Sequence[float],
          options: TiesOptions, stats: None) -> torch.Tensor:
    trimmed = trim(deltas, float(options.density))
    return disjoint_mean(trimmed, weights).mul_(float(options.scale))


register(Method("ties", TiesOptions, merge, weighted=True,
                summary="trim top-density, sign election, disjoint mean"))
