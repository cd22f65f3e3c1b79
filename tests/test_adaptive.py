"""Adaptive sampling (dots.search.study.adaptive): the stopping rule against its formula, rounds
through a real engine, and the objective computed from what was drawn."""

from __future__ import annotations

from math import comb

import pytest
from helpers import lab_scorer

from dots.errors import DotsError
from dots.scoring.grade import answer_labels, consistency
from dots.search.study.adaptive import AdaptiveConfig, majority_is_settled


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


@pytest.fixture(scope="module")
def lab_scorer_adaptive(tmp_path_factory):
    """The search's Scorer on the shipped lab trio (transformers engine), adaptive rounds on."""
    scorer = lab_scorer(tmp_path_factory.mktemp("adaptive"), k=K, queries=4, adaptive=ROUNDS)
    scorer.engine.swap_coefficients({"sft": 1.0, "rlvr": 1.0})
    yield scorer
    scorer.engine.close()


K = 6
ROUNDS = {"enabled": True, "first": 2, "step": 2, "confidence": 0.95}


def test_rounds_stop_settled_queries_and_draw_the_rest_to_k(lab_scorer_adaptive):
    """Rounds through a real engine: the lab model's sampled answers, labelled by the grader,
    stop each query at the first round whose majority is settled, else at k. The trial's
    objective is computed from what the rounds drew (the same draws again: seeded)."""
    scorer = lab_scorer_adaptive
    calls = []
    generate = scorer._generate

    def counted(prompts, n, seed):
        calls.append((list(prompts), n, seed))
        return generate(prompts, n, seed)

    scorer._generate = counted
    try:
        drawn = scorer.sample(scorer.prompts, seed=3)
    finally:
        del scorer._generate
    k, first, step = K, ROUNDS["first"], ROUNDS["step"]
    assert calls[0] == (scorer.prompts, first, 3) and all(n == step for _, n, _ in calls[1:])
    assert [seed for _, _, seed in calls] == list(range(3, 3 + len(calls)))  # round r: seed + r
    for prompt, samples in zip(scorer.prompts, drawn):
        labels = answer_labels(samples)
        n = len(samples)
        assert n in range(first, k + 1, step), (prompt, n)
        assert n == k or majority_is_settled(labels, k, 0.95), (prompt, samples)  # stopped: settled
        for m in range(first, n, step):  # not settled at any earlier round, else it would have stopped
            assert not majority_is_settled(answer_labels(samples[:m]), k, 0.95), (prompt, m, samples)
        assert sum(prompt in p for p, _, _ in calls) == 1 + (n - first) // step  # drawn only while open
    assert any(len(d) < k for d in drawn)  # the lab model is sure of some answers: they stop early
    result = scorer({"sft": 1.0, "rlvr": 1.0}, seed=3)  # the trial: swap (the same λ), rounds, Eq. 4
    assert result.per_query == [consistency(samples) for samples in drawn]
    assert result.consistency == sum(result.per_query) / len(drawn)
    assert result.samples == sum(map(len, drawn)) < k * len(drawn)
