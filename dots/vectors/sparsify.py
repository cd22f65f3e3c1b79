"""Sparsify and rescale one task vector (DoTS §4.1, Eq. 3; docs/method.md §1).

τ̃ = γ·(τ⊙M): M keeps exactly the top round(density·n) entries of |τ| — per tensor
(`scope: tensor`, the official code) or over the whole vector (`scope: global`, one
exact threshold found first by `RadixSelect`, two extra passes) — and
γ = ‖τ‖₂ / (‖τ⊙M‖₂ + 1e-8), one for the whole vector (`rescale: global`, Eq. 3 as
written), one per tensor (`tensor`) or none. `sparsify_source` streams (name, τ⊙M) and
leaves the scales in its `SparseStats`, so a per-tensor top-k needs a single pass even
with a global γ (the scale is applied when τ̃ is read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import torch

from dots.checks import check_choice, check_density
from dots.runtime.progress import progress_bar
from dots.vectors.deltas import task_vector
from dots.vectors.masks import TopKMask, topk_magnitude_mask
from dots.vectors.topk import CHUNK, Threshold, global_kth_largest, kth_largest

if TYPE_CHECKING:
    from dots.io.align import Alignment

__all__ = ["RESCALES", "SCOPES", "SparseStats", "SparsifyConfig", "sparsify_source", "ties_cut_mask"]

log = logging.getLogger(__name__)

SCOPES = ("tensor", "global")
RESCALES = ("global", "tensor", "none")
# exact: k = round(d·n) entries, ties at the cut to lower flat indices (docs/method.md §1);
# ties: k = ⌊d·n⌋ and every entry with |τ| ≥ the k-th largest (the official DoTS code,
# `preset=official`; docs/official.md), none when k < 1
CUTS = ("exact", "ties")


@dataclass(frozen=True)
class SparsifyConfig:
    """Options of docs/method.md §1. density 1.0 + rescale none = the dense task vector."""

    density: float = 0.3
    scope: str = "tensor"
    rescale: str = "global"
    cut: str = "exact"

    def __post_init__(self) -> None:
        check_density(self.density, "sparsify.density")
        check_choice(self.scope, SCOPES, "sparsify.scope")
        check_choice(self.rescale, RESCALES, "sparsify.rescale")
        check_choice(self.cut, CUTS, "sparsify.cut")

    def key(self) -> dict:
        """The options as a cache key: `cut` only when it is not `exact`, so entries built
        before the option existed keep their keys."""
        options = {"density": self.density, "scope": self.scope, "rescale": self.rescale}
        return options if self.cut == "exact" else {**options, "cut": self.cut}

    @property
    def dense(self) -> bool:
        return float(self.density) >= 1.0


@dataclass
class SparseStats:
    """Norms and scales of one sparsified task vector, filled while it streams."""

    norm_sq: float = 0.0
    kept_sq: float = 0.0
    kept: int = 0
    numel: int = 0
    tensor_gamma: dict[str, float] = field(default_factory=dict)

    def gamma(self, rescale: str) -> float:
        """γ of Eq. 3 for the whole vector (1 unless `rescale: global`)."""
        return (self.norm_sq**0.5) / (self.kept_sq**0.5 + 1e-8) if rescale == "global" else 1.0


def squared_norm(tensor: torch.Tensor, chunk: int = CHUNK) -> float:
    """Σ x² in float64, `chunk` entries at a time: no float64 copy of the whole tensor (a
    152064×3584 embedding would need two of 4.4 GB each)."""
    flat = tensor.reshape(-1)
    return sum(float(flat[i : i + chunk].double().pow_(2).sum()) for i in range(0, flat.numel(), chunk))


def keep_in_place(tensor: torch.Tensor, mask: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """tensor ⊙ mask in place, the same bits as `tensor * mask` (-0.0 where a negative entry
    is dropped), `chunk` entries at a time: float × bool over a whole tensor would first
    make a float32 copy of the mask."""
    flat, keep = tensor.view(-1), mask.reshape(-1)
    for i in range(0, flat.numel(), chunk):
        flat[i : i + chunk].mul_(keep[i : i + chunk])
    return tensor


def _count_kept(density: float, n: int, cut: str) -> int:
    """k of a cut: round(d·n) (exact) or ⌊d·n⌋ (ties, as the official code's int(n·d))."""
    return int(n * density) if cut == "ties" else round(density * n)


def ties_cut_mask(x: torch.Tensor, density: float) -> torch.Tensor:
    """The official DoTS cut: M = |x| ≥ t, t the k-th largest |x|, k = ⌊d·n⌋ (every entry tied
    at t kept, so possibly more than k); nothing kept when k < 1."""
    flat = x.reshape(-1)
    k = _count_kept(density, flat.numel(), "ties")
    if k <= 0:
        return torch.zeros(x.shape, dtype=torch.bool)
    threshold, _ = kth_largest(flat, k, absolute=True)
    return x.abs() >= threshold


def sparsify_source(
    al: Alignment, key: str, cfg: SparsifyConfig, stats: SparseStats
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, τ⊙M) in float32 for every merged tensor of source `key`; `stats` collects the
    norms and, with `rescale: tensor`, each tensor's γ. Memory: τ of one tensor, its boolean
    mask and chunk-sized temporaries (the mask is found on |τ| chunk by chunk and applied
    in place)."""
    names = al.merged
    stats.numel = sum(al.base.info(n).numel for n in names)
    top: TopKMask | None = None
    if cfg.scope == "global" and not cfg.dense:
        k_global = _count_kept(float(cfg.density), stats.numel, cfg.cut)
        log.info("source %s: finding the global top-%d threshold (two passes)", key, k_global)
        if k_global <= 0:
            top = TopKMask(Threshold.none())
        else:
            value, ties = global_kth_largest(lambda: (task_vector(al, key, n) for n in names), k_global)
            # a ties cut keeps every entry equal to the threshold: hand out all of them
            top = TopKMask(Threshold(k_global, value, ties if cfg.cut == "exact" else stats.numel))
    for name in progress_bar(names, f"τ̃ {key}"):
        tau = task_vector(al, key, name)
        t_norm = squared_norm(tau)
        if cfg.dense:
            sparse = tau
        elif top is None and cfg.cut == "ties":
            sparse = keep_in_place(tau, ties_cut_mask(tau, float(cfg.density)))
        elif top is None:
            sparse = keep_in_place(tau, topk_magnitude_mask(tau, float(cfg.density)))
        else:
            sparse = keep_in_place(tau, top.mask(tau.abs()))
        t_kept = squared_norm(sparse)
        stats.norm_sq += t_norm
        stats.kept_sq += t_kept
        stats.kept += int(torch.count_nonzero(sparse))  # (sparse != 0).sum() would count in an int64 copy
        stats.tensor_gamma[name] = 1.0 if cfg.rescale != "tensor" else (t_norm**0.5) / (t_kept**0.5 + 1e-8)
        del tau
        yield name, sparse
