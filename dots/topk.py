"""Exact top-k by magnitude in a few streaming passes (TIES trim, DoTS Eq. 3's mask M).

The rule everywhere: keep exactly k entries — every entry above the k-th largest value,
then entries equal to it in increasing flat index. `kth_largest` finds that value
without sorting: a fixed-seed sample of 2^16 entries brackets it (±5 binomial standard
deviations), one pass over the tensor counts the entries above and at the bracket ends
and keeps the few inside it, and `kthvalue` on those gives the exact answer. If the
sample missed (or the bracket holds too many entries), a two-level radix histogram of
float32 bit patterns (`global_kth_largest`) answers instead — still exact. Every pass
works on chunks of at most `CHUNK` entries, so the temporaries stay bounded whatever
the tensor size; `kthvalue` on the whole tensor would copy it and run single-threaded.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import torch

CHUNK = 1 << 22  # entries per chunk in bounded-memory scans
SAMPLE = 1 << 16  # entries sampled to bracket the k-th largest value
BRACKET_SIGMAS = 5.0


def chunks(flat: torch.Tensor, size: int = CHUNK, absolute: bool = False) -> Iterator[torch.Tensor]:
    """Consecutive slices of a flat tensor (their magnitudes with `absolute`)."""
    for start in range(0, flat.numel(), size):
        part = flat[start:start + size]
        yield part.abs() if absolute else part


def _bits(magnitude: torch.Tensor) -> torch.Tensor:
    """Non-negative float32 → int32 bit patterns; their order is the order of the values."""
    return magnitude.reshape(-1).float().contiguous().view(torch.int32)


def global_kth_largest(stream: Callable[[], Iterator[torch.Tensor]], k: int) -> tuple[float, int]:
    """Exact k-th largest of |values| over a stream of tensors, in two bounded-memory passes.

    Pass 1 histograms the high 16 bits of the float32 pattern, pass 2 the low 16 bits
    inside the bucket holding the k-th value. Returns (threshold, number of entries equal
    to it that must be kept so that exactly k are kept).
    """
    threshold, need, _equal = streamed_kth_largest(lambda: ([t] for t in stream()), k)[0]
    return threshold, need


def streamed_kth_largest(stream: Callable[[], Iterator[list[torch.Tensor]]], k: int) -> list[tuple[float, int, int]]:
    """`global_kth_largest` of several value sets at once: each item of the stream holds one
    tensor per set (e.g. one row block of every source's τ), so one read of the data serves
    every set. Per set: (threshold, entries equal to it to keep, entries equal to it);
    k ≤ 0 gives (∞, 0, 0): nothing is kept."""
    highs: list[torch.Tensor] = []
    for tensors in stream():
        if not highs:
            highs = [torch.zeros(1 << 16, dtype=torch.int64) for _ in tensors]
            if k <= 0:
                return [(math.inf, 0, 0)] * len(tensors)
        for high, tensor in zip(highs, tensors):
            high += torch.bincount(_bits(tensor.abs()) >> 16, minlength=1 << 16)
    ks = [k] * len(highs)
    buckets, larger = [], []
    for high, k in zip(highs, ks):
        above = torch.flip(torch.cumsum(torch.flip(high, [0]), 0), [0])  # entries with high >= b
        buckets.append(int((above >= k).nonzero().max()))
        larger.append(int(above[buckets[-1] + 1]) if buckets[-1] + 1 < (1 << 16) else 0)
    lows = [torch.zeros(1 << 16, dtype=torch.int64) for _ in ks]
    for tensors in stream():
        for low, bucket, tensor in zip(lows, buckets, tensors):
            bits = _bits(tensor.abs())
            low += torch.bincount(bits[(bits >> 16) == bucket] & 0xFFFF, minlength=1 << 16)
    out = []
    for low, bucket, more, k in zip(lows, buckets, larger, ks):
        above_low = torch.flip(torch.cumsum(torch.flip(low, [0]), 0), [0]) + more
        idx = int((above_low >= k).nonzero().max())
        strictly = int(above_low[idx + 1]) if idx + 1 < (1 << 16) else more
        threshold = torch.tensor([(bucket << 16) | idx], dtype=torch.int32).view(torch.float32).item()
        out.append((threshold, k - strictly, int(low[idx])))
    return out


def _bracket(flat: torch.Tensor, k: int, absolute: bool, sample: int) -> tuple[float, float]:
    """(lower, upper) values that hold the k-th largest magnitude with overwhelming odds."""
    n = flat.numel()
    picks = torch.randint(0, n, (sample,), generator=torch.Generator().manual_seed(0))
    values = flat[picks].float()
    ranked = torch.sort(values.abs() if absolute else values, descending=True).values
    q = k / n
    margin = BRACKET_SIGMAS * math.sqrt(sample * q * (1.0 - q)) + 2.0
    top, bottom = math.floor(q * sample - margin), math.ceil(q * sample + margin)
    upper = float(ranked[top]) if top >= 0 else math.inf
    lower = float(ranked[bottom]) if bottom < sample else -math.inf
    return lower, upper


def kth_largest(flat: torch.Tensor, k: int, absolute: bool = True, chunk: int = CHUNK,
                sample: int = SAMPLE) -> tuple[float, int]:
    """The k-th largest (|value| with `absolute`) of a flat tensor, 0 < k ≤ n, and how many
    entries equal to it complete the top k. Exact; see the module docstring for how."""
    n = flat.numel()
    if not 0 < k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    if n <= 4 * sample:
        mag = flat.abs() if absolute else flat
        threshold = float(torch.kthvalue(mag.float(), n - k + 1).values)
        return threshold, k - int((mag > threshold).sum())
    lower, upper = _bracket(flat, k, absolute, sample)
    above = at_upper = at_lower = 0
    inside: list[torch.Tensor] = []
    held, cap = 0, max(1 << 20, n // 8)  # ~2% of n is expected inside
    for part in chunks(flat, chunk, absolute):
        above += int((part > upper).sum())
        at_upper += int((part == upper).sum())
        if lower != upper:
            at_lower += int((part == lower).sum())
        between = part[(part > lower) & (part < upper)]
        held += between.numel()
        if held > cap:  # the sample was unrepresentative: fall back
            return global_kth_largest(lambda: chunks(flat, chunk), k)
        inside.append(between.float())
    if above < k <= above + at_upper:
        return upper, k - above
    rank = k - above - at_upper
    if 0 < rank <= held:
        pool = torch.cat(inside)
        threshold = float(torch.kthvalue(pool, held - rank + 1).values)
        return threshold, rank - int((pool > threshold).sum())
    if 0 < rank - held <= at_lower:
        return lower, rank - held
    return global_kth_largest(lambda: chunks(flat, chunk), k)


def mask_largest(flat: torch.Tensor, threshold: float, need: int, absolute: bool = True,
                 chunk: int = CHUNK) -> tuple[torch.Tensor, int]:
    """Boolean mask of the entries above `threshold` plus the first `need` equal to it (by
    flat index), and how many of those `need` are still owed (for streams of tensors)."""
    mask = torch.empty(flat.numel(), dtype=torch.bool)
    start = 0
    for part in chunks(flat, chunk, absolute):
        keep = mask[start:start + part.numel()]
        torch.gt(part, threshold, out=keep)
        if need > 0:
            ties = part == threshold
            count = int(ties.sum())
            if count <= need:
                keep |= ties
                need -= count
            else:
                keep[ties.nonzero().view(-1)[:need]] = True
                need = 0
        start += part.numel()
    return mask, need


def topk_mask(magnitude: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of exactly k largest entries of a non-negative tensor; ties at the
    threshold go to lower flat indices."""
    flat = magnitude.reshape(-1)
    if k >= flat.numel():
        return torch.ones_like(magnitude, dtype=torch.bool)
    if k <= 0:
        return torch.zeros_like(magnitude, dtype=torch.bool)
    threshold, need = kth_largest(flat, k, absolute=False)
    return mask_largest(flat, threshold, need, absolute=False)[0].view(magnitude.shape)


def topk_magnitude_mask(x: torch.Tensor, density: float, chunk: int = CHUNK) -> torch.Tensor:
    """Mask of the top round(density·n) entries of |x| (ties to lower flat indices)."""
    flat = x.reshape(-1)
    n = flat.numel()
    k = round(float(density) * n)
    if k >= n:
        return torch.ones(x.shape, dtype=torch.bool)
    if k <= 0:
        return torch.zeros(x.shape, dtype=torch.bool)
    threshold, need = kth_largest(flat, k, absolute=True, chunk=chunk)
    return mask_largest(flat, threshold, need, absolute=True, chunk=chunk)[0].view(x.shape)


def tie_cutoffs(stream: Callable[[], Iterator[tuple[int, list[torch.Tensor]]]], thresholds: list[float],
                needs: list[int], equals: list[int]) -> list[int]:
    """For each value set, the flat index of the last entry equal to its threshold that the top
    k keeps (ties go to lower flat indices): -1 when none is kept, past the end when all are.
    `stream` yields (flat offset, one tensor per set); it is read only if some set keeps part
    of its ties."""
    cutoffs = [-1 if need <= 0 else (1 << 62) if need >= equal else None
               for need, equal in zip(needs, equals)]
    if all(c is not None for c in cutoffs):
        return cutoffs  # type: ignore[return-value]
    seen = [0] * len(thresholds)
    for start, tensors in stream():
        for i, tensor in enumerate(tensors):
            if cutoffs[i] is not None:
                continue
            where = (tensor.reshape(-1).abs() == thresholds[i]).nonzero().view(-1)
            if seen[i] + where.numel() >= needs[i]:
                cutoffs[i] = start + int(where[needs[i] - seen[i] - 1])
            seen[i] += where.numel()
        if all(c is not None for c in cutoffs):
            break
    return cutoffs  # type: ignore[return-value]


def keep_mask(block: torch.Tensor, start: int, threshold: float, cutoff: int) -> torch.Tensor:
    """Mask of a block at flat offset `start`: |x| > threshold, or |x| == threshold at a flat
    index ≤ cutoff — a slice of the whole tensor's top-k mask (`tie_cutoffs`)."""
    magnitude = block.abs()
    keep = magnitude > threshold
    ties = magnitude.eq_(threshold).view(-1)
    ties[max(0, cutoff - start + 1):] = 0
    return keep.logical_or_(ties.view(keep.shape))
