"""Exact top-k by magnitude, in bounded memory (TIES' trim, DoTS Eq. 3's mask M, docs/method.md §6).

One rule everywhere: keep exactly k entries — every entry above the k-th largest value,
then entries equal to it in stream order (tensor order, then flat index) until k are
kept. This module finds the k-th largest value; `dots.vectors.masks` turns it into masks.

- `RadixSelect`: the exact k-th largest |x| of a stream, for several k at once, in two
  passes — pass 1 histograms the high 16 bits of the float32 pattern (a non-negative
  float's bits, read as int32, order like the value), pass 2 the low 16 bits inside the
  buckets holding the k-th values. Memory: 65,536 counters per (stream, wanted bucket).
- `kth_largest` (one tensor): a fixed-seed sample of 2^16 entries brackets the k-th value
  (±5 binomial standard deviations); one pass counts the entries above and at the bracket
  ends and keeps the few inside it, and `kthvalue` on those gives the exact answer. If the
  sample missed, `RadixSelect` answers instead — still exact. Every pass works on chunks
  of at most `CHUNK` entries (`kthvalue` on the whole tensor would copy it and run on one
  thread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

__all__ = [
    "CHUNK",
    "RadixSelect",
    "Threshold",
    "global_kth_largest",
    "kth_largest",
    "magnitude_bits",
    "streamed_kth_largest",
    "SAMPLE",
]

CHUNK = 1 << 22  # entries per chunk in bounded-memory scans
SAMPLE = 1 << 16  # entries sampled to bracket the k-th largest value
BRACKET_SIGMAS = 5.0
_BINS = 1 << 16


def chunks(flat: torch.Tensor, size: int = CHUNK, absolute: bool = False) -> Iterator[torch.Tensor]:
    """Consecutive slices of a flat tensor (their magnitudes with `absolute`)."""
    for start in range(0, flat.numel(), size):
        part = flat[start : start + size]
        yield part.abs() if absolute else part


def magnitude_bits(magnitude: torch.Tensor) -> torch.Tensor:
    """Flat int32 view of a non-negative float32 tensor; integer order = value order."""
    return magnitude.reshape(-1).to(torch.float32).contiguous().view(torch.int32)


@dataclass(frozen=True)
class Threshold:
    """Keep |x| > value, plus the first `ties` entries with |x| == value: exactly k in all.
    `equal`: how many entries of the stream equal `value`."""

    k: int
    value: float
    ties: int
    equal: int = 0

    @classmethod
    def none(cls) -> Threshold:
        return cls(0, math.inf, 0, 0)


def _accumulate(hist: np.ndarray, index: np.ndarray) -> None:
    """hist[i] += #(index == i); a scatter for small inputs, where a full-width bincount
    would cost more than the data."""
    if index.size * 8 < hist.size:
        np.add.at(hist, index, 1)
    elif index.size:
        hist += np.bincount(index, minlength=hist.size)


def _count_at_or_above(hist: np.ndarray) -> np.ndarray:
    return np.cumsum(hist[::-1])[::-1]


class RadixSelect:
    """The exact k-th largest magnitude of one stream for several k at once.

    Usage: `add_high(bits)` for every chunk (pass 1), then `add_low(bits)` for every chunk
    (pass 2), then `thresholds()`. `bits` come from `magnitude_bits`.
    """

    def __init__(self, ks: Iterable[int]):
        self.ks = sorted(set(int(k) for k in ks))
        self.high = np.zeros(_BINS, dtype=np.int64)
        self.total = 0
        self._buckets: dict[int, int] | None = None  # k -> high bucket
        self._slot: np.ndarray | None = None  # high bucket -> row of self._low, or -1
        self._low = np.zeros((0, _BINS), dtype=np.int64)

    def add_high(self, bits: torch.Tensor) -> None:
        _accumulate(self.high, bits.numpy() >> 16)
        self.total += bits.numel()

    def _plan(self) -> dict[int, int]:
        if self._buckets is None:
            above = _count_at_or_above(self.high)
            buckets = {}
            for k in self.ks:
                kk = min(k, self.total)
                if kk > 0:
                    buckets[kk] = int(np.nonzero(above >= kk)[0].max())
            self._buckets = buckets
            wanted = sorted(set(buckets.values()))
            self._slot = np.full(_BINS, -1, dtype=np.int64)
            self._slot[wanted] = np.arange(len(wanted))
            self._low = np.zeros((len(wanted), _BINS), dtype=np.int64)
        return self._buckets

    def add_low(self, bits: torch.Tensor) -> None:
        self._plan()
        assert self._slot is not None  # set by _plan
        if not len(self._low):
            return
        values = bits.numpy()
        if len(self._low) == 1:  # one wanted bucket: a comparison, no per-entry lookup table
            bucket = int(np.nonzero(self._slot >= 0)[0][0])
            _accumulate(self._low[0], values[(values >> 16) == bucket] & 0xFFFF)
            return
        slot = self._slot[values >> 16]
        inside = slot >= 0
        index = slot[inside] * _BINS + (values[inside] & 0xFFFF)
        _accumulate(self._low.reshape(-1), index)

    def thresholds(self) -> dict[int, Threshold]:
        """k -> Threshold; k <= 0 keeps nothing, k >= the stream length keeps everything."""
        buckets = self._plan()
        assert self._slot is not None  # set by _plan
        above_high = _count_at_or_above(self.high)
        out: dict[int, Threshold] = {}
        for k in self.ks:
            kk = min(k, self.total)
            if kk <= 0:
                out[k] = Threshold.none()
                continue
            bucket = buckets[kk]
            larger = int(above_high[bucket + 1]) if bucket + 1 < _BINS else 0
            above_low = _count_at_or_above(self._low[self._slot[bucket]]) + larger
            idx = int(np.nonzero(above_low >= kk)[0].max())
            strictly = int(above_low[idx + 1]) if idx + 1 < _BINS else larger
            value = float(np.array([(bucket << 16) | idx], dtype=np.int32).view(np.float32)[0])
            out[k] = Threshold(kk, value, kk - strictly, int(self._low[self._slot[bucket]][idx]))
        return out


def global_kth_largest(stream: Callable[[], Iterator[torch.Tensor]], k: int) -> tuple[float, int]:
    """Exact k-th largest of |values| over a stream of tensors (two passes of `stream()`):
    (threshold, number of entries equal to it that must be kept so that exactly k are)."""
    threshold, need, _equal = streamed_kth_largest(lambda: ([t] for t in stream()), k)[0]
    return threshold, need


def streamed_kth_largest(stream: Callable[[], Iterator[list[torch.Tensor]]], k: int) -> list[tuple[float, int, int]]:
    """`global_kth_largest` of several value sets at once: each item of the stream holds one
    tensor per set (e.g. one row block of every source's τ), so one read of the data serves
    every set. Per set: (threshold, entries equal to it to keep, entries equal to it);
    k ≤ 0 gives (∞, 0, 0): nothing is kept."""
    selectors: list[RadixSelect] = []
    for tensors in stream():
        if not selectors:
            selectors = [RadixSelect([k]) for _ in tensors]
            if k <= 0:
                return [(math.inf, 0, 0)] * len(tensors)
        for selector, tensor in zip(selectors, tensors):
            selector.add_high(magnitude_bits(tensor.abs()))
    for tensors in stream():
        for selector, tensor in zip(selectors, tensors):
            selector.add_low(magnitude_bits(tensor.abs()))
    return [(t.value, t.ties, t.equal) for t in (s.thresholds()[k] for s in selectors)]


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


def kth_largest(
    flat: torch.Tensor, k: int, absolute: bool = True, chunk: int = CHUNK, sample: int = SAMPLE
) -> tuple[float, int]:
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
