"""`ram` / `ram_plus` (Reinforced Agent Merging, seed 003, Eq. 1-7).

m_i = |τ_i| > ε (ε = 1e-5), c = Σ_i m_i per entry. Merged delta:
  c = 0  → 0;
  c ≥ 2  → (1/c)·Σ_{i: m_i} τ_i   (the mean over the models that changed it: ÷c, not ÷K);
  c = 1  → λ_t·τ_t for the one model t that changed it,
with λ_t = 1 + r·clip(ρ_t, 0, α) (Eq. 6) and the overlap-unique ratio
ρ_t = #(entries t changed that another model also changed) / #(entries only t changed)
(Eq. 2). `ram` is r = 0 (λ = 1); `ram_plus` is r = 0.1, α = 2.0 (the paper's values).

`scope: global` (the paper; default) counts ρ_t over the whole model in a first pass;
`scope: tensor` counts it per tensor (as mergekit's `ramplus_tl`; on a tensor merged in row blocks,
over all its blocks first: the tensor pass). A model with no
unique entries gets ρ = ∞ → clipped to α (its λ then multiplies nothing); a model that
changed nothing gets ρ = 0. No division by zero happens.

Difference to the authors' public script: it uses λ = 1 + (R − 1)·min(ρ, 1), i.e. a
clip bound of 1 instead of α (with R − 1 = r = 0.1 its λ never exceeds 1.1, where
Eq. 6 with α = 2 allows 1.2). We follow the paper's Eq. 6; set `alpha: 1.0` to get the
script's rule.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from dots.checks import number_in
from dots.merge.methods.base import BlockStream, Part, TensorStream, check_choice, chunkwise
from dots.merge.methods.declare import merge_method

if TYPE_CHECKING:
    from dots.io.align import Alignment

log = logging.getLogger(__name__)

SCOPES = ("global", "tensor")


@dataclass(frozen=True)
class RamOptions:
    epsilon: float = 1e-5
    r: float = 0.0
    alpha: float = 2.0
    scope: str = "global"

    def __post_init__(self) -> None:
        check_choice(self.scope, SCOPES, "method.scope")
        for key in ("epsilon", "r", "alpha"):
            number_in(getattr(self, key), f"method.{key}", 0.0, math.inf, high_open=True)


@dataclass(frozen=True)
class RamPlusOptions(RamOptions):
    r: float = 0.1


@dataclass
class RamStats:
    """Whole-model overlap counts per source and the resulting ρ_i, λ_i."""

    shared: list[int]
    unique: list[int]
    lambdas: list[float] = field(default_factory=list)


def overlap_ratio(shared: int, unique: int) -> float:
    """ρ = shared / unique; ∞ when nothing is unique, 0 when nothing changed."""
    if unique > 0:
        return shared / unique
    return float("inf") if shared > 0 else 0.0


def rescale_factor(shared: int, unique: int, r: float, alpha: float) -> float:
    """λ = 1 + r·clip(ρ, 0, α) (Eq. 6)."""
    rho = overlap_ratio(shared, unique)
    return 1.0 + float(r) * min(max(rho, 0.0), float(alpha))


def _change_counts(deltas: Sequence[torch.Tensor], epsilon: float) -> torch.Tensor:
    counts = torch.zeros(deltas[0].shape, dtype=torch.uint8)
    for delta in deltas:
        counts.add_(delta.abs() > epsilon)
    return counts


def _overlap_counts(
    deltas: Sequence[torch.Tensor], counts: torch.Tensor, epsilon: float
) -> tuple[list[int], list[int]]:
    shared, unique = [], []
    only_one = counts == 1
    for delta in deltas:
        changed = delta.abs() > epsilon
        unique.append(int((changed & only_one).sum()))
        shared.append(int(changed.sum()) - unique[-1])
    return shared, unique


def overlap_pass(stream: Callable[[], TensorStream], options: RamOptions, alignment: Alignment) -> RamStats | None:
    """First pass, global scope with r ≠ 0: count shared / unique entries of each source over the model."""
    if float(options.r) == 0.0 or options.scope != "global":
        return None
    shared = unique = None
    for _name, _base, deltas in stream():
        chunk_shared, chunk_unique = _overlap_counts(deltas, _change_counts(deltas, options.epsilon), options.epsilon)
        shared = chunk_shared if shared is None else [a + b for a, b in zip(shared, chunk_shared)]
        unique = chunk_unique if unique is None else [a + b for a, b in zip(unique, chunk_unique)]
        del deltas
    assert shared is not None and unique is not None
    lambdas = [rescale_factor(s, u, options.r, options.alpha) for s, u in zip(shared, unique)]
    for key, s, u, lam in zip(alignment.sources, shared, unique, lambdas):
        log.info(
            "ram: source %s shares %d and owns %d changed entries: ρ=%.4g, λ=%.4f", key, s, u, overlap_ratio(s, u), lam
        )
    return RamStats(shared, unique, lambdas)


def tensor_overlap_pass(blocks: BlockStream, options: RamOptions) -> list[float] | None:
    """Tensor pass, `scope: tensor` with r ≠ 0: λ_i from this tensor's shared / unique counts,
    summed over its row blocks."""
    if float(options.r) == 0.0 or options.scope != "tensor":
        return None
    eps = float(options.epsilon)
    shared = unique = None
    for _start, _base, deltas in blocks():
        s, u = _overlap_counts(deltas, _change_counts(deltas, eps), eps)
        shared = s if shared is None else [a + b for a, b in zip(shared, s)]
        unique = u if unique is None else [a + b for a, b in zip(unique, u)]
    assert shared is not None and unique is not None
    return [rescale_factor(s, u, options.r, options.alpha) for s, u in zip(shared, unique)]


@merge_method(
    "ram",
    RamOptions,
    first_pass=overlap_pass,
    tensor_pass=tensor_overlap_pass,
    min_sources=2,
    blockwise=True,
    summary="mean on shared entries, unique entries kept (RAM)",
)
def ram(deltas: list[torch.Tensor], options: RamOptions, stats: RamStats | None, part: Part) -> torch.Tensor:
    """m_i = |τ_i| > ε, c = Σ_i m_i; merged = Σ_{i: m_i} λ_i^[c=1]·τ_i / max(c, 1) with
    λ_i = 1 + r·clip(ρ_i, 0, α) (ρ_i from the first pass, the tensor pass or this tensor)."""
    eps = float(options.epsilon)
    counts = _change_counts(deltas, eps)
    if float(options.r) == 0.0:
        lambdas = [1.0] * len(deltas)
    elif part.facts is not None:  # a row block: λ from the tensor pass
        lambdas = part.facts
    elif options.scope == "tensor":
        shared, unique = _overlap_counts(deltas, counts, eps)
        lambdas = [rescale_factor(s, u, options.r, options.alpha) for s, u in zip(shared, unique)]
    elif stats is None:
        raise ValueError("ram with r != 0 and scope global needs the statistics of its first pass")
    else:
        lambdas = stats.lambdas
    only_one = counts == 1
    out = torch.zeros_like(deltas[0])
    for delta, lam in zip(deltas, lambdas):
        delta.masked_fill_(delta.abs() <= eps, 0.0)  # entries this model did not change contribute nothing
        if lam != 1.0:
            chunkwise(lambda d, o, lam=lam: d.mul_(torch.where(o, lam, 1.0)), delta, only_one)
        out.add_(delta)
    del only_one
    # c ≥ 2: the mean over the models that changed the entry; c ≤ 1: as is
    chunkwise(lambda o, c: o.div_(c.clamp(min=1)), out, counts)
    return out


ram_plus = ram.renamed("ram_plus", RamPlusOptions, "RAM with unique entries rescaled by 1 + r·clip(ρ, 0, α)")
