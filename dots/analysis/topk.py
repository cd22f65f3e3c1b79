"""Exact global top-k of |τ| over a stream of chunks, in bounded memory (SPEC §6).

A non-negative float32's bit pattern, read as int32, orders like the value. Pass 1
histograms the high 16 bits of every |τ| (65,536 counters); the bucket holding the k-th
largest value is then known. Pass 2 histograms the low 16 bits of the entries in that
bucket, which pins the k-th largest value exactly. Several k (and several sources) share
the two passes: a lookup table sends each entry of a wanted bucket to that bucket's
histogram in one sweep. Memory: 65,536 int64 counters per (source, wanted bucket).

Selecting exactly k entries (SPEC §1) needs a tie rule: entries equal to the threshold
are kept in stream order (tensor order, then flat index) until k are kept — the rule
`dots.taskvec` uses for `scope: global`, so both select the same entries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch

_BINS = 1 << 16


def magnitude_bits(magnitude: torch.Tensor) -> torch.Tensor:
    """Flat int32 view of a non-negative float32 tensor; integer order = value order."""
    return magnitude.reshape(-1).to(torch.float32).contiguous().view(torch.int32)


def _accumulate(hist: np.ndarray, index: np.ndarray) -> None:
    """hist[i] += #(index == i); a scatter for small inputs, where a full-width bincount
    would cost more than the data."""
    if index.size * 8 < hist.size:
        np.add.at(hist, index, 1)
    elif index.size:
        hist += np.bincount(index, minlength=hist.size)


def _count_at_or_above(hist: np.ndarray) -> np.ndarray:
    return np.cumsum(hist[::-1])[::-1]


@dataclass(frozen=True)
class Threshold:
    """Keep |x| > value, plus the first `ties` entries with |x| == value: exactly k in all."""

    k: int
    value: float
    ties: int

    @classmethod
    def none(cls) -> "Threshold":
        return cls(0, math.inf, 0)


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
        if not len(self._low):
            return
        values = bits.numpy()
        slot = self._slot[values >> 16]
        inside = slot >= 0
        index = slot[inside] * _BINS + (values[inside] & 0xFFFF)
        _accumulate(self._low.reshape(-1), index)

    def thresholds(self) -> dict[int, Threshold]:
        """k -> Threshold; k <= 0 keeps nothing, k >= the stream length keeps everything."""
        buckets = self._plan()
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
            out[k] = Threshold(kk, value, kk - strictly)
        return out


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
        """Bool mask over the chunk."""
        flat = magnitude.reshape(-1)
        keep = flat > self.threshold.value
        n = self._ties(flat, n_ties)
        if n:
            ties = flat == self.threshold.value
            if n <= self.ties_left:
                keep |= ties
                self.ties_left -= n
            else:
                keep |= ties & (torch.cumsum(ties, 0) <= self.ties_left)
                self.ties_left = 0
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
