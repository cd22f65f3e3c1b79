"""`linear`: the weighted average of the checkpoints (Wortsman et al. 2022, model soups).

θ = Σ_i w_i·θ_i / Σ_i w_i, i.e. merged delta = Σ_i w_i·τ_i / Σ_i w_i (weights default 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.merge.methods.base import WHOLE, Method, Part, weighted_sum
from dots.merge.methods.registry import register


@dataclass(frozen=True)
class LinearOptions:
    pass


def merge(
    name: str,
    base: torch.Tensor,
    deltas: list[torch.Tensor],
    weights: Sequence[float],
    options: LinearOptions,
    stats: None,
    part: Part = WHOLE,
) -> torch.Tensor:
    return weighted_sum(deltas, weights).div_(float(sum(weights)))


register(
    Method("linear", LinearOptions, merge, weighted=True, blockwise=True, summary="weighted average of the checkpoints")
)
