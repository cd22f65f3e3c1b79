"""Per-tensor counters of the three streaming passes (SPEC §6).

Pass 1 (`count_pass1`): L2 norms, update sparsity at ε, exact-zero counts, max |τ|,
K-source overlap (RAM §3), pairwise dot products, sign agreement, SAR regions and the
conflict norm (seed 001, Eq. 10), plus the high-bit histograms for the top-k.
Pass 2 (`count_pass2`): the low-bit histograms (exact thresholds) and sparsity at the
relative threshold ε_rel·max|τ| (seed 002, Eq. 2).
Pass 3 (`count_pass3`): membership in the global top fraction (DoTS Fig. 1c / Tab. 12)
and sign interference against the SFT vector kept at each retention (DoTS Fig. 1b).

Counters are kept per tensor name and summed later over any grouping (layer, module).
Each chunk's sums come from float32 BLAS dots; running totals are Python floats (float64).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from dots.analysis.topk import RadixSelect, TopKMask, magnitude_bits


@dataclass
class SourceCounts:
    """One source's counters over a set of entries."""

    numel: int = 0
    sumsq: float = 0.0
    nonzero: int = 0  # τ != 0
    changed: int = 0  # |τ| > ε
    changed_rel: int = 0  # |τ| > ε_rel·max|τ| (pass 2, when asked)
    top: int = 0  # in the source's global top fraction (pass 3)
    maxabs: float = 0.0
    overlap: list[int] = field(default_factory=list)  # [j] = changed entries also changed by j others

    def add(self, other: "SourceCounts") -> None:
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

    def add(self, other: "PairCounts") -> None:
        _add_fields(self, other)


def _add_fields(dst, src) -> None:
    for f in fields(dst):
        a, b = getattr(dst, f.name), getattr(src, f.name)
        if f.name == "maxabs":
            setattr(dst, f.name, max(a, b))
        elif isinstance(a, list):
            if len(a) < len(b):
                a.extend([0] * (len(b) - len(a)))
            for i, v in enumerate(b):
                a[i] += v
        else:
            setattr(dst, f.name, a + b)


def _sumsq(x: torch.Tensor) -> float:
    return float(torch.dot(x, x))


def count_pass1(
    taus: dict[str, torch.Tensor],
    eps: float,
    sources: dict[str, SourceCounts],
    pairs: dict[tuple[str, str], PairCounts],
    selectors: dict[str, RadixSelect],
) -> None:
    """Update `sources` / `pairs` (one tensor's counters) with one chunk of every τ."""
    keys = list(taus)
    changed: dict[str, torch.Tensor] = {}
    signs: dict[str, torch.Tensor] = {}
    for key in keys:
        tau = taus[key]
        magnitude = tau.abs()
        counts = sources[key]
        counts.numel += tau.numel()
        counts.sumsq += _sumsq(tau)
        counts.nonzero += int(torch.count_nonzero(tau))
        changed[key] = magnitude > eps
        counts.changed += int(changed[key].sum())
        if tau.numel():
            counts.maxabs = max(counts.maxabs, float(magnitude.max()))
        selectors[key].add_high(magnitude_bits(magnitude))
        signs[key] = torch.sign(tau).to(torch.int8)
    how_many = torch.zeros_like(changed[keys[0]], dtype=torch.int8)
    for key in keys:
        how_many += changed[key]
    for key in keys:  # RAM §3: of i's changed entries, how many others changed each
        hist = torch.bincount(how_many[changed[key]].to(torch.int64), minlength=len(keys) + 1)[1:]
        sources[key].add(SourceCounts(overlap=[int(v) for v in hist]))
    for (a, b), counts in pairs.items():
        ta, tb = taus[a], taus[b]
        sign_product = signs[a] * signs[b]
        opposite = sign_product < 0
        counts.dot += float(torch.dot(ta, tb))
        counts.both_nonzero += int(torch.count_nonzero(sign_product))
        counts.opposite += int(opposite.sum())
        counts.conflict_sq += _sumsq(torch.where(opposite, ta * tb, 0.0).to(torch.float64))
        ca, cb = changed[a], changed[b]
        both = ca & cb
        counts.conflict += int((both & opposite).sum())
        counts.agree += int((both & (sign_product > 0)).sum())
        counts.private += int((ca ^ cb).sum())
        counts.unchanged += ta.numel() - int((ca | cb).sum())


def count_pass2(
    taus: dict[str, torch.Tensor],
    sources: dict[str, SourceCounts],
    selectors: dict[str, RadixSelect],
    relative_cut: dict[str, float] | None,
) -> None:
    """Low-bit histograms; entries above the relative threshold when one is set."""
    for key, tau in taus.items():
        magnitude = tau.abs()
        selectors[key].add_low(magnitude_bits(magnitude))
        if relative_cut is not None:
            sources[key].changed_rel += int((magnitude > relative_cut[key]).sum())


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


def count_pass3(
    taus: dict[str, torch.Tensor],
    sources: dict[str, SourceCounts],
    top_masks: dict[str, TopKMask],
    interference: SignInterference | None,
) -> None:
    """Top-fraction membership per source and the sign interference counts."""
    kept: dict[str, torch.Tensor] = {}
    for key, tau in taus.items():
        kept[key] = top_masks[key].mask(tau.abs())
        sources[key].top += int(kept[key].sum())
    if interference is None:
        return
    sft, rlvr = taus[interference.sft], taus[interference.rlvr]
    rlvr_kept = kept[interference.rlvr] & (rlvr != 0)
    interference.rlvr_kept += int(rlvr_kept.sum())
    contradicted = rlvr_kept & ((torch.sign(sft) * torch.sign(rlvr)) < 0)
    sft_magnitude = sft.abs()
    for i, mask in enumerate(interference.sft_masks):
        sft_kept = mask.mask(sft_magnitude)  # called on every chunk: keeps the tie budget right
        interference.opposite[i] += int((contradicted & sft_kept).sum())
