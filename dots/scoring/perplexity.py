"""Perplexity of a model on texts (SPEC §4): exp of the mean token NLL over all texts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class PromptNLL:
    """Summed negative log-likelihood of a text's tokens (all but the first) and their count."""

    nll: float
    tokens: int


def perplexity(nlls: Sequence[PromptNLL]) -> float:
    """exp(Σ NLL / Σ tokens) over all texts (one mean over every token, not per text);
    NaN when the texts have no scored token."""
    tokens = sum(r.tokens for r in nlls)
    if tokens == 0:
        return float("nan")
    return math.exp(sum(r.nll for r in nlls) / tokens)
