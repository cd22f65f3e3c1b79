"""Exact global top-k of |τ| over a stream of chunks, in bounded memory (SPEC §6).

A non-negative float32's bit pattern, read as int32, orders like the value. Pass 1
histograms the high 16 bits of every |τ| (65,536 counters); the bucket holding the k-th
largest value is then known. Pass 2 histograms the low 16 bits of the entries in that
bucket, which pins the k-th largest value exactly. Several k (and several sources) share
the two passes. Memory: two 65,536-entry int64 histograms per (source, bucket).

Selecting exactly k entries (SPEC §1) needs a tie rule: entries equal to the threshold
are kept in stream order (tensor order, then flat index) until k are kept — the rule
`dots.taskvec` uses for `scope: global`, so both select the same entries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

_BINS = 1 << 16


def magnitude_bits(magnitude: torch.Tensor) -> torch.Tensor:
    """Flat int32 view of a non-negative float32 tensor; integer order = value order."""
    return magnitude.reshape(-1).to(torch.float32).contiguous().view(torch.int32)


def _accumulate(hist: torch.Tensor, index: torch.Tensor) -> None:
    """hist[i] += #(index == i); a scatter for small inputs, where a full-width bincount
    would cost more than the data."""
    if index.numel() * 8 < hist.numel():
        hist.index_put_((index.to(torch.int64),), torch.ones(index.numel(), dtype=torch.int64), accumulate=True)
    elif index.numel():
        hist += torch.bincount(index, minlength=hist.numel())


def _count_at_or_above(hist: torch.Tensor) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(hist, [0]), 0), [0])


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
        self.high = torch.zeros(_BINS, dtype=torch.int64)
        self.total = 0
        self._buckets: dict[int, int] | None = None  # k -> high bucket
        self._low: dict[int, torch.Tensor] = {}  # bucket -> low histogram

    def add_high(self, bits: torch.Tensor) -> None:
        _accumulate(self.high, bits >> 16)
        self.total += bits.numel()

    def _plan(self) -> dict[int, int]:
        if self._buckets is None:
            above = _count_at_or_above(self.high)
            buckets = {}
            for k in self.ks:
                kk = min(k, self.total)
                if kk > 0:
                    buckets[kk] = int((above >= kk).nonzero().max())
            self._buckets = buckets
            self._low = {b: torch.zeros(_BINS, dtype=torch.int64) for b in set(buckets.values())}
        return self._buckets

    def add_low(self, bits: torch.Tensor) -> None:
        self._plan()
        if not self._low:
            return
        high = bits >> 16
        for bucket, hist in self._low.items():
            _accumulate(hist, bits[high == bucket] & 0xFFFF)

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
            above_low = _count_at_or_above(self._low[bucket]) + larger
            idx = int((above_low >= kk).nonzero().max())
            strictly = int(above_low[idx + 1]) if idx + 1 < _BINS else larger
            value = torch.tensor([(bucket << 16) | idx], dtype=torch.int32).view(torch.float32).item()
            out[k] = Threshold(kk, value, kk - strictly)
        return out


class TopKMask:
    """Stateful mask of the global top-k: call `mask` on every chunk in stream order."""

    def __init__(self, threshold: Threshold):
        self.threshold = threshold
        self.ties_left = threshold.ties

    def mask(self, magnitude: torch.Tensor) -> torch.Tensor:
        flat = magnitude.reshape(-1)
        keep = flat > self.threshold.value
        if self.ties_left > 0:
            ties = flat == self.threshold.value
            n_ties = int(ties.sum())
            if n_ties:
                if n_ties <= self.ties_left:
                    keep |= ties
                    self.ties_left -= n_ties
                else:
                    keep |= ties & (torch.cumsum(ties, 0) <= self.ties_left)
                    self.ties_left = 0
        return keep
