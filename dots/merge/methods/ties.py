"""`ties` (Yadav et al. 2023, TIES-Merging): trim, elect sign, disjoint mean.

Per task vector keep the top `density` fraction (default 0.2) of entries by |τ_i|
(per tensor, exactly k = round(density·n), ties to lower flat indices), elect the sign
of Σ_i w_i·τ̂_i per entry, average only the kept non-zero entries that agree with it,
scale by λ (`scale`, default 1.0). Unit weights give the paper's method.
Blockwise: on a large tensor its tensor pass (`thresholds`) finds each τ_i's exact k-th magnitude and tie
cutoff from row blocks (`dots.vectors.topk.streamed_kth_largest`), so each block is trimmed with
the same mask the whole tensor would get.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dots.merge.methods.base import (
    WHOLE,
    BlockStream,
    Part,
    check_density,
    disjoint_mean,
    keep_only,
    topk_magnitude_mask,
)
from dots.merge.methods.declare import merge_method
from dots.vectors.masks import keep_mask, tie_cutoffs
from dots.vectors.topk import streamed_kth_largest


@dataclass(frozen=True)
class TiesOptions:
    density: float = 0.2
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_density(self.density, "method.density")  # the option's own name in each error


def trim(deltas: list[torch.Tensor], density: float, part: Part = WHOLE) -> list[torch.Tensor]:
    """Zero all but the top-`density` entries of each τ_i by magnitude, in place; on a block,
    by the (threshold, tie cutoff) of each τ_i that `thresholds` put in `part.facts`."""
    if density >= 1.0:
        return deltas
    for i, delta in enumerate(deltas):
        if part.facts is None:
            keep_only(delta, topk_magnitude_mask(delta, density))
        else:
            threshold, cutoff = part.facts[i]
            keep_only(delta, keep_mask(delta, part.start, threshold, cutoff))
    return deltas


def thresholds(total: int, blocks: BlockStream, options: TiesOptions) -> list[tuple[float, int]] | None:
    """Per source, the k-th largest |τ_i| over the whole tensor (k = round(density·n)) and
    the flat index of the last tie kept, in two or three passes over the row blocks."""
    density = float(options.density)
    if density >= 1.0:
        return None
    found = streamed_kth_largest(lambda: (deltas for _s, _b, deltas in blocks()), round(density * total))
    kth = [t for t, _need, _equal in found]
    cutoffs = tie_cutoffs(
        lambda: ((start, deltas) for start, _b, deltas in blocks()),
        kth,
        [need for _t, need, _e in found],
        [equal for _t, _n, equal in found],
    )
    return list(zip(kth, cutoffs))


@merge_method(
    "ties",
    TiesOptions,
    tensor_pass=thresholds,
    blockwise=True,
    summary="trim top-density, sign election, disjoint mean",
)
def ties(deltas: list[torch.Tensor], weights: Sequence[float], options: TiesOptions, part: Part) -> torch.Tensor:
    """τ̂_i = τ_i ⊙ topk(|τ_i|, density); s = sign(Σ_i w_i·τ̂_i);
    merged = λ·Σ_{i: sign τ̂_i = s} w_i·τ̂_i / Σ_{i: sign τ̂_i = s} w_i (0 where none agrees)."""
    trimmed = trim(deltas, float(options.density), part)
    return disjoint_mean(trimmed, weights).mul_(float(options.scale))
