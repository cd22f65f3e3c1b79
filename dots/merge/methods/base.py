"""The tensors a merge method sees, and the arithmetic several methods share.

A method is a short function of one parameter's float32 tensors that declares the
inputs it uses (`dots.merge.methods.declare`) and returns the merged delta. `deltas` are
the task vectors τ_i = θ_i − θ0 (the method may overwrite them in place: the executor
hands over tensors it will not use again, which keeps peak memory at a few tensors).
The executor (`dots.merge`) owns I/O, dtypes, memory and progress and computes
θ = θ0 + merged delta.

A `blockwise` method is elementwise once a few per-tensor facts are known (TIES'
thresholds, RAM's per-tensor ρ); its optional `tensor_pass` gathers them from a stream
of row blocks, and the executor then feeds a large tensor (an embedding) in row blocks,
each call told by `part` where the block sits. Peak memory is then a few blocks,
whatever the model's width; the written bits are those of the whole-tensor call.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from dots.checks import check_choice, check_density, check_probability  # noqa: F401  (the methods' checks)
from dots.keys import name_seed
from dots.vectors.masks import topk_magnitude_mask  # noqa: F401  (re-exported for the methods)
from dots.vectors.topk import CHUNK

__all__ = ["DROP_BLOCK", "Part", "WHOLE", "drop_mask", "topk_magnitude_mask"]

# (name, base float32, [τ_1..τ_K] float32) for every merged tensor, in checkpoint order;
# a large tensor comes as several consecutive items of row blocks.
TensorStream = Iterator[tuple[str, torch.Tensor, list[torch.Tensor]]]
# (flat offset of the block, base rows float32, [τ_1..τ_K] rows float32) of one tensor.
BlockStream = Callable[[], Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]]]


@dataclass(frozen=True)
class Part:
    """Where the entries a merge call sees lie in their tensor: flat [start, start + the
    block's numel) of `total` entries, with the `facts` the method's tensor_pass gathered
    over the whole tensor. `WHOLE` (start 0, total None, facts None): the whole tensor."""

    start: int = 0
    total: int | None = None
    facts: Any = None


WHOLE = Part()


# --- shared arithmetic -----------------------------------------------------------------


def chunkwise(fn: Callable[..., Any], *tensors: torch.Tensor, size: int = CHUNK) -> None:
    """Apply an in-place `fn` to aligned chunks of equally sized contiguous tensors.

    Mixing dtypes in one elementwise op (float += bool mask, float /= uint8 count) makes
    torch materialise a converted copy of the whole operand; chunking bounds that copy.
    """
    flats = [t.view(-1) for t in tensors]
    for start in range(0, flats[0].numel(), size):
        fn(*(f[start : start + size] for f in flats))


def keep_only(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x ⊙ mask in place (entries outside the boolean mask become 0)."""
    return x.masked_fill_(~mask, 0.0)


def weighted_sum(deltas: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Σ_i w_i·τ_i in float32 (into a fresh tensor)."""
    out = torch.mul(deltas[0], float(weights[0]))
    for delta, w in zip(deltas[1:], weights[1:]):
        out.add_(delta, alpha=float(w))
    return out


def disjoint_mean(deltas: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """TIES sign election + disjoint mean (Yadav et al. 2023, Eq. for τ_m). Overwrites `deltas`.

    Elected sign = sign(Σ_i w_i·τ_i); result = Σ_{i agrees} w_i·τ_i / Σ_{i agrees} w_i over
    the non-zero entries whose sign equals the elected sign (0 where none agrees). With
    unit weights this is the paper's plain disjoint mean (the count is kept in uint8).
    Weights must be positive.
    """
    total = weighted_sum(deltas, weights)
    positive, negative = total > 0, total < 0
    del total
    unit = all(float(w) == 1.0 for w in weights) and len(deltas) < 256
    numerator = torch.zeros_like(deltas[0])
    denominator = torch.zeros(deltas[0].shape, dtype=torch.uint8 if unit else torch.float32)
    for delta, w in zip(deltas, weights):
        agrees = (delta > 0).logical_and_(positive).logical_or_((delta < 0).logical_and_(negative))
        numerator.add_(keep_only(delta, agrees), alpha=float(w))
        if unit:
            denominator.add_(agrees)  # bool → uint8: a quarter-size temporary at most
        else:
            chunkwise(lambda d, a, w=w: d.add_(a, alpha=float(w)), denominator, agrees)
        del agrees
    del positive, negative
    # where no model agrees the numerator is 0; the floor only avoids 0/0
    floor = 1 if unit else torch.finfo(torch.float32).tiny
    chunkwise(lambda n, d: n.div_(d.clamp(min=floor)), numerator, denominator)
    return numerator


DROP_BLOCK = 1 << 20  # entries per independently seeded block of a random drop mask
_drop_pool: ThreadPoolExecutor | None = None


def _forget_drop_pool() -> None:
    global _drop_pool
    _drop_pool = None  # a forked child has none of the parent's threads


os.register_at_fork(after_in_child=_forget_drop_pool)


def drop_mask(shape: Sequence[int], p: float, name: str, seed: int, index: int = 0, part: Part = WHOLE) -> torch.Tensor:
    """Boolean mask, True with probability p: the random drop of DARE and SAR.

    Block b (DROP_BLOCK consecutive flat entries of the whole tensor) is `torch.rand(len)
    < p` from a CPU generator seeded by name_seed(f"{name}|{index}|{b}", seed): the mask
    depends only on (tensor name, seed, source index), never on processing order or on
    how the executor splits the tensor (`part`: the mask of flat entries [start, start +
    prod(shape)) of `part.total`). Blocks are drawn on all intra-op threads (one
    generator is sequential: ~5 ns per entry).
    """
    global _drop_pool
    mask = torch.empty(math.prod(shape), dtype=torch.bool)
    start, stop = part.start, part.start + mask.numel()
    total = stop if part.total is None else part.total

    def fill(block: int) -> None:
        first, last = block * DROP_BLOCK, min(total, (block + 1) * DROP_BLOCK)
        gen = torch.Generator().manual_seed(name_seed(f"{name}|{index}|{block}", int(seed)))
        lo, hi = max(first, start), min(last, stop)
        if (lo, hi) == (first, last):
            torch.lt(torch.rand(last - first, generator=gen), p, out=mask[lo - start : hi - start])
        else:  # a block cut by the part's edge: draw it whole, keep the part's share
            torch.lt(
                torch.rand(last - first, generator=gen)[lo - first : hi - first], p, out=mask[lo - start : hi - start]
            )

    blocks = range(start // DROP_BLOCK, (stop + DROP_BLOCK - 1) // DROP_BLOCK)
    if len(blocks) <= 1 or torch.get_num_threads() <= 1:
        for block in blocks:
            fill(block)
    else:
        if _drop_pool is None:
            _drop_pool = ThreadPoolExecutor(max_workers=torch.get_num_threads(), thread_name_prefix="dots-drop")
        list(_drop_pool.map(fill, blocks))
    return mask.view(tuple(shape))


def dare_drop(deltas: list[torch.Tensor], p: float, name: str, seed: int, part: Part = WHOLE) -> list[torch.Tensor]:
    """DARE (Yu et al. 2024): drop each entry with probability p, survivors ×1/(1−p), in place.

    Source i's mask is `drop_mask(shape, p, name, seed, i, part)`, so the result depends
    only on (name, seed, source order), never on the order in which tensors are processed.
    """
    if p <= 0.0:
        return deltas
    for i, delta in enumerate(deltas):
        dropped = drop_mask(delta.shape, p, name, seed, i, part)
        delta.masked_fill_(dropped, 0.0).div_(1.0 - p)
        del dropped
    return deltas
