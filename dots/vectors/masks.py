"""Masks of the exact top-k (`dots.vectors.topk` finds the threshold): entries above the
k-th largest value, then entries equal to it in stream order until k are kept."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

from dots.vectors.topk import _BINS, CHUNK, Threshold, chunks, kth_largest, magnitude_bits

__all__ = ["TieCounter", "TopKMask", "keep_mask", "mask_largest", "tie_cutoffs", "topk_magnitude_mask", "topk_mask"]


def mask_largest(
    flat: torch.Tensor, threshold: float, need: int, absolute: bool = True, chunk: int = CHUNK
) -> tuple[torch.Tensor, int]:
    """Boolean mask of the entries above `threshold` plus the first `need` equal to it (by
    flat index), and how many of those `need` are still owed (for streams of tensors)."""
    mask = torch.empty(flat.numel(), dtype=torch.bool)
    start = 0
    for part in chunks(flat, chunk, absolute):
        keep = mask[start : start + part.numel()]
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


def tie_cutoffs(
    stream: Callable[[], Iterator[tuple[int, list[torch.Tensor]]]],
    thresholds: list[float],
    needs: list[int],
    equals: list[int],
) -> list[int]:
    """For each value set, the flat index of the last entry equal to its threshold that the top
    k keeps (ties go to lower flat indices): -1 when none is kept, past the end when all are.
    `stream` yields (flat offset, one tensor per set); it is read only if some set keeps part
    of its ties."""
    cutoffs = [-1 if need <= 0 else (1 << 62) if need >= equal else None for need, equal in zip(needs, equals)]
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
    ties[max(0, cutoff - start + 1) :] = 0
    return keep.logical_or_(ties.view(keep.shape))


class TopKMask:
    """Stateful membership in the global top-k: call `mask` or `select` on every chunk,
    in stream order, so that the ties at the threshold are handed out in that order.
    `n_ties` (the chunk's number of entries equal to the threshold, see `TieCounter`)
    saves a sweep of the chunk; without it the chunk is scanned while ties remain."""

    def __init__(self, threshold: Threshold):
        self.threshold = threshold
        self.ties_left = threshold.ties

    def _ties(self, flat: torch.Tensor, n_ties: int | None) -> int:
        if self.ties_left <= 0:
            return 0
        return int(torch.count_nonzero(flat == self.threshold.value)) if n_ties is None else n_ties

    def mask(self, magnitude: torch.Tensor, n_ties: int | None = None) -> torch.Tensor:
        """Bool mask over the chunk (flat)."""
        flat = magnitude.reshape(-1)
        if not self._ties(flat, n_ties):
            return flat > self.threshold.value
        keep, self.ties_left = mask_largest(flat, self.threshold.value, self.ties_left, absolute=False)
        return keep

    def select(self, magnitude: torch.Tensor, where: torch.Tensor, n_ties: int | None = None) -> torch.Tensor:
        """Bool membership of the chunk entries at positions `where` (ascending)."""
        flat = magnitude.reshape(-1)
        sub = flat[where]
        keep = sub > self.threshold.value
        n = self._ties(flat, n_ties)
        if n:
            if n <= self.ties_left:
                keep |= sub == self.threshold.value
                self.ties_left -= n
            else:
                rank = torch.cumsum(flat == self.threshold.value, 0)[where]
                keep |= (sub == self.threshold.value) & (rank <= self.ties_left)
                self.ties_left = 0
        return keep


class TieCounter:
    """Per chunk, the exact number of entries equal to each of several threshold values,
    in one sweep (a bucket lookup on the high bits, then the low bits of the few entries
    in those buckets) instead of one comparison sweep per threshold."""

    def __init__(self, masks: list[TopKMask]):
        self.masks = masks
        bits = np.array([m.threshold.value for m in masks], dtype=np.float32).view(np.int32).astype(np.int64)
        wanted = sorted(set((bits >> 16).tolist()))
        self._slot = np.full(_BINS, -1, dtype=np.int64)
        self._slot[wanted] = np.arange(len(wanted))
        self._codes = self._slot[bits >> 16] * _BINS + (bits & 0xFFFF)

    def counts(self, magnitude: torch.Tensor) -> list[int | None]:
        """Entries equal to each mask's threshold (None where the mask has no ties left)."""
        active = [m.ties_left > 0 for m in self.masks]
        if not any(active):
            return [None] * len(self.masks)
        values = magnitude_bits(magnitude).numpy()
        slot = self._slot[values >> 16]
        inside = slot >= 0
        codes = slot[inside] * _BINS + (values[inside] & 0xFFFF)
        return [int(np.count_nonzero(codes == c)) if a else None for c, a in zip(self._codes.tolist(), active)]
