"""The coefficients λ of a synthesis θ0 + Σ_i λ_i·τ̃_i (docs/method.md §2): what the synthesis, the
engines' swaps, the export and the search pass around.

`Coefficients` maps each source to either one λ (every tensor of the source: the paper's
model granularity) or a mapping from module group (`dots.io.modules.MODULE_GROUPS`:
attention, mlp, embed_head, norm) to λ (module granularity: the λ of a tensor is its
group's, `dots.io.modules.module_group`). Both forms may be mixed across sources. They are
plain dicts, so they cross process boundaries (vLLM's `collective_rpc`), JSON (the
export's marker) and YAML (result.yaml) unchanged.

For one tensor, `tensor_lambdas` resolves them to the (source, λ) pairs to add, in the
order the coefficients name the sources, λ = 0 left out — the same list for a source given
one λ and for a source whose groups all have that λ, so both give the same bits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Union

from dots.errors import DotsError
from dots.io.modules import MODULE_GROUPS, module_group

if TYPE_CHECKING:
    from dots.vectors.cache import TaskVectors

__all__ = ["CheckedCoefficients", "Coefficients", "check_coefficients", "format_coefficients", "tensor_lambdas"]

# source → λ, or source → {module group → λ}
Coefficients = Mapping[str, Union[float, Mapping[str, float]]]
# the checked form: plain dicts of floats, in the caller's source order
CheckedCoefficients = dict[str, Union[float, dict[str, float]]]


def _finite(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DotsError(f"coefficient of {where} is not a number: {value!r}") from None
    if not math.isfinite(number):
        raise DotsError(f"coefficient of {where} is not finite: {value}")
    return number


def check_coefficients(task_vectors: TaskVectors, coefficients: Coefficients) -> CheckedCoefficients:
    """Exactly one entry per source of the cache, each a finite float or a mapping with a finite
    float for every module group (no other key); else a DotsError. When a source is given per
    group, every tensor of the cache must have a module group (else a DotsError naming it), so
    a swap fails before it changes any weight, never halfway through."""
    sources = set(task_vectors.sources)
    unknown = sorted(set(coefficients) - sources)
    missing = sorted(sources - set(coefficients))
    if unknown or missing:
        parts = ([f"unknown source(s) {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])
        raise DotsError(f"coefficients must name each source {sorted(sources)} once: {'; '.join(parts)}")
    out: CheckedCoefficients = {}
    for source, value in coefficients.items():
        if not isinstance(value, Mapping):
            out[source] = _finite(value, source)
            continue
        groups = set(value)
        if groups != set(MODULE_GROUPS):
            extra, lacking = sorted(groups - set(MODULE_GROUPS)), [g for g in MODULE_GROUPS if g not in groups]
            raise DotsError(
                f"coefficients of {source} per module group must name each of {', '.join(MODULE_GROUPS)} once"
                + (f": unknown {extra}" if extra else "")
                + (f": missing {lacking}" if lacking else "")
            )
        out[source] = {g: _finite(value[g], f"{source}.{g}") for g in MODULE_GROUPS}
    if any(isinstance(v, dict) for v in out.values()):
        for name in task_vectors.names:
            module_group(name)
    return out


def tensor_lambdas(lambdas: CheckedCoefficients, name: str) -> list[tuple[str, float]]:
    """(source, λ) of tensor `name` in the coefficients' source order, λ = 0 left out (a source
    that adds nothing is not read). The module group is looked up only when some source is
    given per group, so model-granularity coefficients never depend on tensor names."""
    group = module_group(name) if any(isinstance(v, dict) for v in lambdas.values()) else ""
    pairs = []
    for source, value in lambdas.items():
        lam = value[group] if isinstance(value, dict) else value
        if lam != 0.0:
            pairs.append((source, lam))
    return pairs


def format_coefficients(coefficients: Coefficients, digits: int = 3, source_sep: str = ", ") -> str:
    """`sft=1.000, rlvr=0.500`; a source given per group as `sft[attention=1.000 mlp=0.500 …]`
    (logs, the Pareto plot's legend)."""
    parts = []
    for source, value in coefficients.items():
        if isinstance(value, Mapping):
            inner = " ".join(f"{g}={float(v):.{digits}f}" for g, v in value.items())
            parts.append(f"{source}[{inner}]")
        else:
            parts.append(f"{source}={float(value):.{digits}f}")
    return source_sep.join(parts)
