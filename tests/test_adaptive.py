"""Adaptive sampling (dots.search.adaptive): the stopping rule against its formula, rounds
through a real engine, and the objective computed from what was drawn."""

from __future__ import annotations

import random
from math import comb

import pytest

from dots.errors import DotsError
from dots.search.adaptive import AdaptiveConfig, majority_is_settled, sample_adaptively


def beta_tail_by_integration(a: int, b: int, steps: int = 200_000) -> float:
    """P(X > 1/2) for X ~ Beta(a+1, b+1) by the midpoint rule (independent of the closed form)."""
    norm = (a + b + 1) * comb(a + b, a)
    h = 0.5 / steps
    return sum(norm * x**a * (1 - x) ** b for x in ((0.5 + (i + 0.5) * h) for i in range(steps))) * h


@pytest.mark.parametrize("a,b", [(4, 0), (3, 1), (5, 1), (6, 2), (2, 0), (7, 0)])
def test_beta_rule_matches_the_posterior(a, b):
    k = 100  # far from k: only the Beta rule can stop
    labels = ["x"] * a + ["y"] * b
    tail = beta_tail_by_integration(a, b)
    for confidence in (0.9, 0.95, 0.99):
        if abs(tail - confidence) > 1e-6:
            assert majority_is_settled(labels, k, confidence) == (tail >= confidence)


def test_exact_rule_and_no_answers():
    # 5 vs 1 with 2 left: the majority cannot change, whatever the confidence
    assert majority_is_settled(["x"] * 5 + ["y"], 8, confidence=0.999)
    assert not majority_is_settled(["x"] * 4 + ["y"] * 2, 8, confidence=0.999)
    assert not majority_is_settled([None] * 4, 8, confidence=0.95)  # no answer never settles early
    assert majority_is_settled([None] * 8, 8, confidence=0.95)  # but k ends it
    assert majority_is_settled(["x"] * 4, 8, confidence=0.95)  # 4/4: P = 31/32


def test_bad_options_are_one_line_errors():
    with pytest.raises(DotsError, match="adaptive.first must be >= 1"):
        AdaptiveConfig(enabled=True, first=0)
    with pytest.raises(DotsError, match="confidence"):
        AdaptiveConfig(enabled=True, confidence=1.0)


def test_rounds_stop_settled_queries_and_draw_the_rest_to_k():
    """A fake-free check of the loop: each prompt answers from its own seeded distribution."""
    shares = {"sure": 1.0, "split": 0.5, "lean": 0.75}
    calls = []

    def generate(prompts, n, seed):
        calls.append((list(prompts), n))
        out = []
        for p in prompts:
            rng = random.Random(f"{p}-{seed}")
            out.append(["A" if rng.random() < shares[p] else "B" for _ in range(n)])
        return out

    cfg = AdaptiveConfig(enabled=True, first=4, step=2)
    drawn = sample_adaptively(list(shares), 8, generate, lambda s: list(s), cfg, seed=0)
    assert len(drawn[0]) == 4  # unanimous after the first round
    assert all(len(d) <= 8 for d in drawn) and calls[0] == (list(shares), 4)
    for d, (_prompt, n) in zip(drawn, [(p, len(d)) for p, d in zip(shares, drawn)]):
        if n < 8:
            assert majority_is_settled(d, 8, 0.95)
        assert n == 4 or not majority_is_settled(d[: n - 2], 8, 0.95)  # stopped at the first settled round
    assert drawn == sample_adaptively(list(shares), 8, generate, lambda s: list(s), cfg, seed=0)  # seeded
