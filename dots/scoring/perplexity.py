"""Perplexity of a model on texts (docs/method.md §4): exp of the mean token NLL over all texts, or (as
the official DoTS code) exp of the mean over texts of each text's mean token NLL."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["PERPLEXITY_MEANS", "PromptNLL", "perplexity"]


@dataclass(frozen=True)
class PromptNLL:
    """Summed negative log-likelihood of a text's tokens (all but the first) and their count."""

    nll: float
    tokens: int


# tokens: one mean over every token; queries: a mean per text first (`preset=official`)
PERPLEXITY_MEANS = ("tokens", "queries")


def perplexity(nlls: Sequence[PromptNLL], mean: str = "tokens") -> float:
    """exp(Σ NLL / Σ tokens) over all texts (`tokens`), or exp(mean_t NLL_t / tokens_t) over
    the texts with a scored token (`queries`); NaN when no text has a scored token."""
    if mean == "queries":
        scored = [r.nll / r.tokens for r in nlls if r.tokens > 0]
        return math.exp(sum(scored) / len(scored)) if scored else float("nan")
    if mean != "tokens":
        raise ValueError(f"perplexity mean must be one of {PERPLEXITY_MEANS}, got {mean!r}")
    tokens = sum(r.tokens for r in nlls)
    if tokens == 0:
        return float("nan")
    return math.exp(sum(r.nll for r in nlls) / tokens)
