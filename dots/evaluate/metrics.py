"""Benchmark metrics of docs/method.md §7: avg@k and pass@k, and the correctness of each sample.

- `avg@k`: k samples per problem; a problem scores the share of its samples that are
  correct; the benchmark scores the mean over problems (DoTS §5.1: AIME24/25, AMC at k=32).
- `pass@k` from n >= k samples: the unbiased estimator 1 − C(n−c, k)/C(n, k) of Chen et al.
  (2021) per problem, averaged; with n = k = 1 it is the accuracy of one sample per problem
  (DoTS §5.1: MATH500, Minerva, OlympiadBench at pass@1, temperature 0.6).

Correctness (docs/method.md §7): math-verify equivalence with the ground truth (`mode: math`) or the
option letter (`mode: choice`), as in `dots.scoring.is_correct`; the answers of one problem
are compared with its gold answer in one batch so each distinct answer is parsed once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from dots.errors import DotsError
from dots.scoring.equivalence import equivalence_classes
from dots.scoring.extract import DEFAULT_FALLBACKS, extract_answer, extract_choice, final_boxes
from dots.scoring.grade import is_correct

__all__ = ["aggregate", "grade", "parse_metric", "pass_at_k", "problem_score"]

MODES = ("math", "choice")
_METRIC_RE = re.compile(r"(avg|pass)@(\d+)")


@dataclass(frozen=True)
class Metric:
    """`kind` avg or pass, at `k`, computed from `n` samples per problem (n >= k)."""

    kind: str
    k: int
    n: int

    @property
    def name(self) -> str:
        return f"{self.kind}@{self.k}"


def parse_metric(text: str, samples: int | None = None) -> Metric:
    """`avg@K` or `pass@K`; `samples` (default K) is how many completions each problem gets."""
    m = _METRIC_RE.fullmatch(str(text).strip())
    if not m or int(m.group(2)) < 1:
        raise DotsError(f"unknown metric {text!r}; use avg@K or pass@K (K >= 1), e.g. avg@32 or pass@1")
    kind, k = m.group(1), int(m.group(2))
    n = k if samples is None else int(samples)
    if kind == "avg" and n != k:
        raise DotsError(f"metric {text}: avg@{k} draws exactly {k} samples per problem, not {n}")
    if n < k:
        raise DotsError(f"metric {text} needs at least {k} samples per problem, got {n}")
    return Metric(kind, k, n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 − C(n−c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def problem_score(correct: Sequence[bool], metric: Metric) -> float:
    """The score of one problem from the correctness of its samples."""
    if len(correct) != metric.n:
        raise ValueError(f"{metric.name} expects {metric.n} samples per problem, got {len(correct)}")
    c = sum(bool(x) for x in correct)
    if metric.kind == "avg":
        return c / len(correct)
    return pass_at_k(len(correct), c, metric.k)


def aggregate(scores: Iterable[float]) -> dict:
    """Mean over problems and its standard error (sample std / √problems)."""
    values = [float(s) for s in scores]
    if not values:
        return {"score": float("nan"), "stderr": float("nan"), "problems": 0}
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"score": mean, "stderr": math.sqrt(var / len(values)), "problems": len(values)}


def grade(
    completions: Sequence[str],
    gold: str,
    mode: str = "math",
    letters: str = "ABCDEFGHIJ",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
) -> tuple[list[str | None], list[bool]]:
    """(extracted answer, correct) for each completion of one problem."""
    if mode == "choice":
        answers = [extract_choice(c, letters) for c in completions]
        return answers, [is_correct(c, gold, "choice", letters=letters) for c in completions]
    if mode != "math":
        raise DotsError(f"unknown answer mode {mode!r}; choose one of {', '.join(MODES)}")
    fallbacks = tuple(fallbacks)
    answers = [extract_answer(c, fallbacks) for c in completions]
    gold_answer = final_boxes(gold) or gold
    labels = equivalence_classes([gold_answer, *answers])  # class 0 is the gold's: pairwise-equal results
    return answers, [label is not None and label == labels[0] for label in labels[1:]]
