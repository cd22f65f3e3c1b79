"""Adaptive sampling for a trial's consistency (an option, `search.adaptive.enabled`): draw
each query's k samples in rounds and stop a query once more samples are unlikely to change
its majority answer — the Beta stopping rule of Adaptive-Consistency (Aggarwal et al.,
"Let's Sample Step by Step", EMNLP 2023), plus the exact rule that stops when the
remaining samples could not change the majority at all.

After n drawn samples with a in the largest answer class and b in the second (0 if none),
with p_a, p_b the two classes' shares, the posterior of p_a / (p_a + p_b) under a uniform
prior is Beta(a + 1, b + 1), and a query stops when

    P(p_a > p_b | a, b) = 1 − I_{1/2}(a + 1, b + 1) ≥ confidence   (0.95 by default)
    or a > b + (k − n)                                            (the majority is final)
    or n = k.

The consistency objective is then Eq. 4 over what was drawn: C(x) = max_y #{samples ≡ y}/n_x
with n_x the samples drawn for x (= k for a query that ran to the end, where it equals the
fixed-k value); the trial's consistency is the mean over queries, as without the option.
"""

from __future__ import annotations

from collections import Counter
from math import comb
from typing import Any, Callable, Sequence

from dots.options.study import AdaptiveConfig

__all__ = ["AdaptiveConfig", "majority_is_settled"]

Generate = Callable[[list[str], int, int], list[list[str]]]  # (prompts, n, seed) → samples


def majority_is_settled(labels: Sequence[Any], k: int, confidence: float) -> bool:
    """The stopping rule of the module docstring for one query's labels so far (None: no answer)."""
    n = len(labels)
    if n >= k:
        return True
    top = Counter(label for label in labels if label is not None).most_common(2)
    a = top[0][1] if top else 0
    b = top[1][1] if len(top) > 1 else 0
    if a > b + (k - n):
        return True
    # I_{1/2}(a+1, b+1) = P(Binomial(a+b+1, 1/2) >= a+1) for integer parameters
    trials = a + b + 1
    below_half = sum(comb(trials, j) for j in range(a + 1, trials + 1)) / 2**trials
    return a > 0 and 1 - below_half >= confidence


def sample_adaptively(
    prompts: Sequence[str],
    k: int,
    generate: Generate,
    label: Callable[[list[str]], list[Any]],
    cfg: AdaptiveConfig,
    seed: int,
) -> list[list[str]]:
    """Each prompt's samples, drawn in rounds (first `cfg.first`, then `cfg.step`) until its
    majority is settled or it has k. Round r is seeded with seed + r, so results do not
    depend on anything but the inputs."""
    drawn: list[list[str]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    round_ = 0
    while active:
        n = min(cfg.first if round_ == 0 else cfg.step, k - len(drawn[active[0]]))
        outs = generate([prompts[i] for i in active], n, seed + round_)
        for i, samples in zip(active, outs):
            drawn[i].extend(samples)
        active = [i for i in active if not majority_is_settled(label(drawn[i]), k, cfg.confidence)]
        round_ += 1
    return drawn
