"""Per-tensor counters of the three streaming passes (docs/method.md §6).

Pass 1 (`count_pass1`): L2 norms, update sparsity at ε, exact-zero counts, K-source
overlap (RAM §3), pairwise dot products, sign agreement, SAR regions and the conflict
norm (seed 001, Eq. 10), plus the high-bit histograms for the top-k.
Pass 2 (`count_pass2`): the low-bit histograms (exact thresholds; max |τ| is the k=1 one).
Pass 3 (`count_pass3`): membership in the global top fraction (DoTS Fig. 1c / Tab. 12),
sparsity at the relative threshold ε_rel·max|τ| (seed 002, Eq. 2), and sign interference
against the SFT vector kept at each retention (DoTS Fig. 1b).

Counters are kept per tensor name and summed later over any grouping (layer, module).
Each chunk's sums come from float32 BLAS dots; running totals are Python floats. The
passes are written for few full sweeps over memory: region, overlap and agreement counts
are derived arithmetically from a handful of mask counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from dots.vectors.masks import TieCounter, TopKMask
from dots.vectors.topk import RadixSelect, magnitude_bits


@dataclass
class SourceCounts:
    """One source's counters over a set of entries."""

    numel: int = 0
    sumsq: float = 0.0
    nonzero: int = 0  # τ != 0
    changed: int = 0  # |τ| > ε
    changed_rel: int = 0  # |τ| > ε_rel·max|τ| (pass 3, when asked)
    top: int = 0  # in the source's global top fraction (pass 3)
    overlap: list[int] = field(default_factory=list)  # [j] = changed entries also changed by j others

    def add(self, other: SourceCounts) -> None:
        _add_fields(self, other)


@dataclass
class PairCounts:
    """Counters of a pair (a, b) of sources over a set of entries."""

    dot: float = 0.0  # Σ τa·τb
    both_nonzero: int = 0  # τa != 0 and τb != 0
    opposite: int = 0  # ... with opposite signs
    conflict_sq: float = 0.0  # Σ (τa·τb)² over opposite-sign entries (seed 001)
    conflict: int = 0  # SAR regions with |τ| > ε: both changed, opposite signs
    agree: int = 0  # both changed, same sign
    private: int = 0  # exactly one changed
    unchanged: int = 0  # neither changed

    def add(self, other: PairCounts) -> None:
        _add_fields(self, other)


def _add_fields(dst, src) -> None:
    for f in fields(dst):
        a, b = getattr(dst, f.name), getattr(src, f.name)
        if isinstance(a, list):
            if len(a) < len(b):
                a.extend([0] * (len(b) - len(a)))
            for i, v in enumerate(b):
                a[i] += v
        else:
            setattr(dst, f.name, a + b)


def _count(mask: torch.Tensor) -> int:
    return int(torch.count_nonzero(mask))


def count_pass1(
    taus: dict[str, torch.Tensor],
    eps: float,
    sources: dict[str, SourceCounts],
    pairs: dict[tuple[str, str], PairCounts],
    selectors: dict[str, RadixSelect],
) -> None:
    """Update `sources` / `pairs` (one tensor's counters) with one chunk of every τ."""
    keys = list(taus)
    n = next(iter(taus.values())).numel()
    changed: dict[str, torch.Tensor] = {}
    n_changed: dict[str, int] = {}
    nonzero: dict[str, torch.Tensor] = {}
    negative: dict[str, torch.Tensor] = {}
    for key in keys:
        tau = taus[key]
        magnitude = tau.abs()
        counts = sources[key]
        counts.numel += n
        counts.sumsq += float(torch.dot(tau, tau))
        nonzero[key] = tau != 0
        counts.nonzero += _count(nonzero[key])
        changed[key] = magnitude > eps
        n_changed[key] = _count(changed[key])
        counts.changed += n_changed[key]
        negative[key] = torch.signbit(tau)
        selectors[key].add_high(magnitude_bits(magnitude))
        del magnitude
    both_changed: dict[tuple[str, str], int] = {}
    for (a, b), pair in pairs.items():
        ta, tb = taus[a], taus[b]
        both_nonzero = nonzero[a] & nonzero[b]
        pair.both_nonzero += _count(both_nonzero)
        opposite = both_nonzero.logical_and_(negative[a] ^ negative[b])
        pair.opposite += _count(opposite)
        pair.dot += float(torch.dot(ta, tb))
        product = ta * tb
        product.mul_(opposite)
        pair.conflict_sq += float(torch.dot(product, product))
        del product
        both = changed[a] & changed[b]
        n_both = both_changed[(a, b)] = _count(both)
        conflict = _count(both.logical_and_(opposite))  # changed entries are non-zero
        pair.conflict += conflict
        pair.agree += n_both - conflict
        pair.private += n_changed[a] + n_changed[b] - 2 * n_both
        pair.unchanged += n - (n_changed[a] + n_changed[b] - n_both)
    _count_overlap(keys, changed, n_changed, both_changed, sources)


def _count_overlap(keys, changed, n_changed, both_changed, sources) -> None:
    """RAM §3: of source i's changed entries, how many are changed by j other sources."""
    if len(keys) == 1:
        hist = {keys[0]: [n_changed[keys[0]]]}
    elif len(keys) == 2:
        shared = both_changed[(keys[0], keys[1])]
        hist = {k: [n_changed[k] - shared, shared] for k in keys}
    else:
        how_many = torch.zeros_like(changed[keys[0]], dtype=torch.int8)
        for key in keys:
            how_many += changed[key]
        levels = [how_many == j for j in range(1, len(keys) + 1)]
        hist = {k: [_count(changed[k] & level) for level in levels] for k in keys}
    for key in keys:
        sources[key].add(SourceCounts(overlap=hist[key]))


def count_pass2(taus: dict[str, torch.Tensor], selectors: dict[str, RadixSelect]) -> None:
    """Low-bit histograms inside the buckets that hold the wanted k-th values."""
    for key, tau in taus.items():
        selectors[key].add_low(magnitude_bits(tau.abs()))


@dataclass
class SignInterference:
    """DoTS Fig. 1b counters: RLVR's kept non-zero entries, and how many of them the SFT
    vector kept at each retention contradicts."""

    sft: str
    rlvr: str
    retentions: list[float]
    sft_masks: list[TopKMask]
    rlvr_kept: int = 0
    opposite: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.opposite = [0] * len(self.retentions)


class TopKState:
    """Every source's top-fraction mask, the SFT retention masks, and their tie counters."""

    def __init__(self, top_masks: dict[str, TopKMask], interference: SignInterference | None):
        self.top_masks = top_masks
        self.interference = interference
        self.counters = {}
        for key, mask in top_masks.items():
            masks = [mask] + (interference.sft_masks if interference and key == interference.sft else [])
            self.counters[key] = TieCounter(masks)


def count_pass3(
    taus: dict[str, torch.Tensor],
    sources: dict[str, SourceCounts],
    state: TopKState,
    relative_cut: dict[str, float] | None,
) -> None:
    """Top-fraction membership per source, sparsity at the relative threshold, and the
    sign interference counts."""
    magnitudes: dict[str, torch.Tensor] = {}
    ties: dict[str, list[int | None]] = {}
    kept: dict[str, torch.Tensor] = {}
    for key, tau in taus.items():
        magnitude = magnitudes[key] = tau.abs()
        ties[key] = state.counters[key].counts(magnitude)
        kept[key] = state.top_masks[key].mask(magnitude, ties[key][0])
        sources[key].top += _count(kept[key])
        if relative_cut is not None:
            sources[key].changed_rel += _count(magnitude > relative_cut[key])
    si = state.interference
    if si is None:
        return
    sft, rlvr = taus[si.sft], taus[si.rlvr]
    rlvr_kept = kept[si.rlvr].logical_and_(rlvr != 0)
    si.rlvr_kept += _count(rlvr_kept)
    contradicted = rlvr_kept.logical_and_(sft != 0).logical_and_(torch.signbit(sft) ^ torch.signbit(rlvr))
    where = contradicted.nonzero().reshape(-1)
    for i, mask in enumerate(si.sft_masks):  # on every chunk: keeps each tie budget right
        si.opposite[i] += _count(mask.select(magnitudes[si.sft], where, ties[si.sft][i + 1]))
