"""`task_arithmetic` (Ilharco et al. 2023): add the scaled sum of the task vectors.

λ (`scale`) defaults to 1.0; 0.7 is the value several papers use — configs that
reproduce them must say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.merge.methods.base import weighted_sum
from dots.merge.methods.declare import merge_method


@dataclass(frozen=True)
class TaskArithmeticOptions:
    scale: float = 1.0


@merge_method("task_arithmetic", TaskArithmeticOptions, blockwise=True, summary="λ·Σ w_i τ_i")
def task_arithmetic(
    deltas: list[torch.Tensor], weights: Sequence[float], options: TaskArithmeticOptions
) -> torch.Tensor:
    """θ = θ0 + λ·Σ_i w_i·τ_i (λ = `scale`)."""
    return weighted_sum(deltas, weights).mul_(float(options.scale))
