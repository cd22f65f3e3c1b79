"""`dots_fixed`: DoTS synthesis at fixed coefficients (DoTS Eq. 6; docs/method.md §2).

θ = θ0 + Σ_i λ_i·τ̃_i with τ̃_i the sparsified, norm-rescaled task vectors of
`dots.vectors.cache` (top `density` 0.3 per tensor, global γ rescale by default) read from
the on-disk τ̃ cache (compact: θ_i's values at the mask, rebuilt against the θ0 read here
as float32(θ_i) − float32(θ0), then γ) — the same arithmetic as the search's synthesis, at the λ of the
paper's ablations: (1, 1), (0.5, 0.5), (1/√2, 1/√2). λ_i are the per-model weights
(`weights`, default 1.0 each). Like `dots.vectors.synth.synthesize`, it starts from θ0 in
float32 and adds λ_i·τ̃_i in source order, skipping λ_i = 0, so the written model is
bit-identical to the synthesiser's at the same λ. Whole tensors: the compact τ̃ is rebuilt
against a whole θ0 tensor (row blocks of it are not read yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from dots.merge.methods.declare import merge_method

if TYPE_CHECKING:
    from dots.io.align import Alignment

__all__ = ["DotsFixedOptions"]


@dataclass(frozen=True)
class DotsFixedOptions:
    density: float = 0.3
    scope: str = "tensor"
    rescale: str = "global"

    def __post_init__(self) -> None:
        from dots.checks import check_choice, check_density
        from dots.vectors.sparsify import RESCALES, SCOPES

        check_density(self.density, "method.density")  # the option's own name in each error
        check_choice(self.scope, SCOPES, "method.scope")
        check_choice(self.rescale, RESCALES, "method.rescale")

    def sparsify(self):
        from dots.vectors.sparsify import SparsifyConfig

        return SparsifyConfig(density=float(self.density), scope=str(self.scope), rescale=str(self.rescale))


def task_vector_cache(options: DotsFixedOptions, alignment: Alignment, cache_dir: Path | None) -> Any:
    """First pass: build (or reuse) the τ̃ cache of every source (the merge's `stats`)."""
    from dots.io.inputs import taskvec_dir
    from dots.vectors.cache import build_task_vectors

    root = taskvec_dir(cache_dir)  # <cache_dir>/taskvec, as for the search
    return build_task_vectors(alignment.base, alignment.sources, options.sparsify(), root, alignment=alignment)


@merge_method(
    "dots_fixed",
    DotsFixedOptions,
    first_pass=task_vector_cache,
    absolute=True,
    summary="θ0 + Σ λ_i τ̃_i at fixed λ (DoTS synthesis)",
)
def dots_fixed(name: str, base: torch.Tensor, weights: Sequence[float], stats: Any) -> torch.Tensor:
    """θ = θ0 + Σ_{i: λ_i ≠ 0} λ_i·τ̃_i, added in source order (the merged weights themselves:
    this method is `absolute`); τ̃_i is rebuilt from the cache against this θ0."""
    out = base.clone()
    for key, lam in zip(stats.sources, weights):
        if float(lam) != 0.0:
            out.add_(stats.get(key, name, theta0=base), alpha=float(lam))  # τ̃ rebuilt against this θ0
    return out
