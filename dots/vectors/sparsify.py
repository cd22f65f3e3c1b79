"""Sparsify and rescale one task vector (DoTS §4.1, Eq. 3; SPEC §1).

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
from dots.progress import progress_bar
from dots.vectors.deltas import task_vector
from dots.vectors.masks import TopKMask, topk_mask
from dots.vectors.topk import Threshold, global_kth_largest

if TYPE_CHECKING:
    from dots.io.align import Alignment

log = logging.getLogger(__name__)

SCOPES = ("tensor", "global")
RESCALES = ("global", "tensor", "none")


@dataclass(frozen=True)
class SparsifyConfig:
    """Options of SPEC §1. density 1.0 + rescale none = the dense task vector."""

    density: float = 0.3
    scope: str = "tensor"
    rescale: str = "global"

    def __post_init__(self) -> None:
        check_density(self.density, "sparsify.density")
        check_choice(self.scope, SCOPES, "sparsify.scope")
        check_choice(self.rescale, RESCALES, "sparsify.rescale")

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


def sparsify_source(
    al: Alignment, key: str, cfg: SparsifyConfig, stats: SparseStats
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, τ⊙M) in float32 for every merged tensor of source `key`; `stats` collects the
    norms and, with `rescale: tensor`, each tensor's γ."""
    names = al.merged
    stats.numel = sum(al.base.info(n).numel for n in names)
    top: TopKMask | None = None
    if cfg.scope == "global" and not cfg.dense:
        k_global = round(float(cfg.density) * stats.numel)
        log.info("source %s: finding the global top-%d threshold (two passes)", key, k_global)
        value, ties = global_kth_largest(lambda: (task_vector(al, key, n) for n in names), k_global)
        top = TopKMask(Threshold(k_global, value, ties))
    for name in progress_bar(names, f"τ̃ {key}"):
        tau = task_vector(al, key, name)
        if cfg.dense:
            sparse = tau
        elif top is None:
            sparse = tau * topk_mask(tau.abs(), round(float(cfg.density) * tau.numel()))
        else:
            sparse = tau * top.mask(tau.abs()).view(tau.shape)
        t_norm = float(tau.double().pow(2).sum())
        t_kept = float(sparse.double().pow(2).sum())
        stats.norm_sq += t_norm
        stats.kept_sq += t_kept
        stats.kept += int((sparse != 0).sum())
        stats.tensor_gamma[name] = 1.0 if cfg.rescale != "tensor" else (t_norm**0.5) / (t_kept**0.5 + 1e-8)
        del tau
        yield name, sparse
