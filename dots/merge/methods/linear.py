"""`linear`: the weighted average of the checkpoints (Wortsman et al. 2022, model soups)."""

from __future__ import annotations

from typing import Sequence

import torch

from dots.merge.methods.base import weighted_sum
from dots.merge.methods.declare import merge_method


@merge_method("linear", blockwise=True, summary="weighted average of the checkpoints")
def linear(deltas: list[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """θ = Σ_i w_i·θ_i / Σ_i w_i, i.e. merged delta = Σ_i w_i·τ_i / Σ_i w_i (weights default 1)."""
    return weighted_sum(deltas, weights).div_(float(sum(weights)))
