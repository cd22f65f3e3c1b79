"""The calibration set of SAR's Fisher (`dots.merge.fisher`): prompts and their gold completions.

`calibration_size` (default 64) queries drawn with a seed from `dots.io.problems.load_pool(pool_cfg)`
when a pool is configured, the gold answer as completion where the pool has one (else the model's
own greedy completion). Without a pool: a built-in, deterministic set of two-digit
addition/subtraction questions ("What is 47 + 38?") with known gold answers ("\\boxed{85}"), so
no model-generated labels and no data files are needed; configure a pool from the target domain
for real runs.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Callable

from dots.errors import DotsError

__all__ = ["CalibrationExample", "builtin_calibration", "calibration_set", "pool_calibration"]

log = logging.getLogger(__name__)

DEFAULT_CALIBRATION_SIZE = 64


@dataclass(frozen=True)
class CalibrationExample:
    """A prompt and its gold completion (None: use the model's own greedy completion)."""

    prompt: str
    answer: str | None = None


def builtin_calibration(
    n: int = DEFAULT_CALIBRATION_SIZE, seed: int = 0, format_prompt: Callable[[str], str] | None = None
) -> list[CalibrationExample]:
    """n seeded two-digit addition/subtraction questions with gold `\\boxed{}` answers."""
    rng = random.Random(seed)
    fmt = format_prompt or (lambda q: q)
    examples = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if rng.random() < 0.5:
            question, answer = f"What is {a} + {b}?", a + b
        else:
            a, b = max(a, b), min(a, b)
            question, answer = f"What is {a} - {b}?", a - b
        examples.append(CalibrationExample(fmt(question), f"\\boxed{{{answer}}}"))
    return examples


def pool_calibration(
    pool_cfg: Any, n: int = DEFAULT_CALIBRATION_SIZE, seed: int = 0, format_prompt: Callable[[str], str] | None = None
) -> list[CalibrationExample]:
    """n queries sampled with `seed` from a configured pool (gold answer when it has one)."""
    from dots.io.problems import load_pool

    queries = list(load_pool(pool_cfg))
    if not queries:
        raise DotsError("the calibration pool is empty")
    if len(queries) > n:
        queries = random.Random(seed).sample(queries, n)
    fmt = format_prompt or (lambda q: q)
    return [CalibrationExample(fmt(q.question), q.answer if q.answer not in (None, "") else None) for q in queries]


def calibration_set(
    pool_cfg: Any | None,
    n: int = DEFAULT_CALIBRATION_SIZE,
    seed: int = 0,
    format_prompt: Callable[[str], str] | None = None,
) -> list[CalibrationExample]:
    """From the pool when one is configured, else the built-in arithmetic set."""
    if pool_cfg:
        return pool_calibration(pool_cfg, n, seed, format_prompt)
    log.warning("no pool configured: Fisher uses the built-in %d arithmetic calibration questions", n)
    return builtin_calibration(n, seed, format_prompt)
