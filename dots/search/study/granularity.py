"""How finely the search sets coefficients (`search.granularity`), and the Optuna parameters
that carry them.

- `model` (the default, the paper's): one λ per source, parameter `lambda_<source>`.
- `module`: one λ per source and module group (`dots.io.modules.MODULE_GROUPS`: attention,
  mlp, embed_head, norm), parameter `lambda_<source>_<group>`, so the search can weight one
  source's attention and another's MLP differently (the module-wise findings of DoTS Fig. 1c
  and seed 001). K sources give 4K parameters.

A trial's parameters become synthesis coefficients (`dots.vectors.coefficients`) through
`coefficients_from_params`: a float per source for `model`, a {group: λ} per source for
`module`. Those are what result.yaml, the export's marker file and the model card record.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dots.checks import check_choice, finite_number
from dots.errors import DotsError
from dots.io.modules import MODULE_GROUPS
from dots.options.study import GRANULARITIES
from dots.vectors.coefficients import CheckedCoefficients

__all__ = ["DEFAULT_GRANULARITY", "coefficients_from_params", "fixed_point", "param_names"]

DEFAULT_GRANULARITY = "model"


def check_granularity(value: Any) -> str:
    """search.granularity as `model` or `module`, else a one-line DotsError."""
    return check_choice(value, GRANULARITIES, "search.granularity")


def param_names(sources: Sequence[str], granularity: str = DEFAULT_GRANULARITY) -> list[str]:
    """The Optuna parameter names of a study, source-major: `lambda_sft, lambda_rlvr` or
    `lambda_sft_attention, lambda_sft_mlp, lambda_sft_embed_head, lambda_sft_norm, lambda_rlvr_…`."""
    if check_granularity(granularity) == "model":
        return [f"lambda_{s}" for s in sources]
    names = [f"lambda_{s}_{g}" for s in sources for g in MODULE_GROUPS]
    if len(set(names)) != len(names):  # cannot happen with these group names; guards a future group
        raise DotsError(f"sources {list(sources)} give clashing parameter names at granularity {granularity}")
    return names


def coefficients_from_params(
    params: Mapping[str, Any], sources: Sequence[str], granularity: str = DEFAULT_GRANULARITY
) -> CheckedCoefficients:
    """A trial's parameters (`param_names`) as the synthesis coefficients, in source order."""
    if check_granularity(granularity) == "model":
        return {s: float(params[f"lambda_{s}"]) for s in sources}
    return {s: {g: float(params[f"lambda_{s}_{g}"]) for g in MODULE_GROUPS} for s in sources}


def fixed_point(values: Sequence[float], sources: Sequence[str], granularity: str = DEFAULT_GRANULARITY) -> list[float]:
    """One `search.fixed` point as the values of `param_names`, in order. `model`: K values,
    one per source. `module`: 4K values (source-major, groups in `MODULE_GROUPS` order), or K
    values, each source's λ then given to all four of its groups. Else a one-line DotsError."""
    check_granularity(granularity)
    k = len(sources)
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise DotsError(f"search.fixed must be a list of points (lists of coefficients), got a point {values!r}")
    point = [finite_number(v, "search.fixed coefficient") for v in values]
    if granularity == "module" and len(point) == k:
        return [v for v in point for _ in MODULE_GROUPS]
    want = k if granularity == "model" else k * len(MODULE_GROUPS)
    if len(point) != want:
        per = f"{k} coefficients ({', '.join(sources)})"
        if granularity == "module":
            per += f" or {want} ({', '.join(param_names(sources, granularity))})"
        raise DotsError(f"search.fixed points need {per} each, got {len(point)}: {point}")
    return point
