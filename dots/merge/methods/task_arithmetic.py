"""`task_arithmetic` (Ilharco et al. 2023): θ = θ0 + λ·Σ_i w_i·τ_i.

λ (`scale`) defaults to 1.0; 0.7 is the value several papers use — configs that
reproduce them must say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.merge.methods.base import WHOLE, Method, Part, weighted_sum
from dots.merge.methods.registry import register


@dataclass(frozen=True)
class TaskArithmeticOptions:
    scale: float = 1.0


def merge(
    name: str,
    base: torch.Tensor,
    deltas: list[torch.Tensor],
    weights: Sequence[float],
    options: TaskArithmeticOptions,
    stats: None,
    part: Part = WHOLE,
) -> torch.Tensor:
    return weighted_sum(deltas, weights).mul_(float(options.scale))


register(Method("task_arithmetic", TaskArithmeticOptions, merge, weighted=True, blockwise=True, summary="λ·Σ w_i τ_i"))
