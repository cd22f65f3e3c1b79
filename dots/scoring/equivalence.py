"""Mathematical equivalence of answers, and equivalence classes (docs/method.md §3 `≡`, §7).

`answers_equivalent(a, b)` decides, in order:
1. equal `normalize`d strings (`dots.scoring.normalize`): the same answer, no parsing;
2. two plain numbers (`dots.scoring.numbers`): exact, or within a relative 1e-4 when one
   is a decimal approximation; scientific notation and percentages read as the field
   reads them; math-verify is not asked;
3. a set `\\{…\\}` against one tuple or interval `(…)`: different (`normalize.shape`);
4. math-verify (Kydlíček et al., the grader docs/method.md §7 names) on `normalize.to_latex` of
   both, in either direction (`verify(gold, target)` is not symmetric), in the helper
   process of `dots.scoring.worker`, at most `COMPARE_TIMEOUT_S` per comparison (a
   comparison that runs over is "not equivalent", and logged). Answers longer than
   `MAX_LATEX_CHARS` are not parsed (string equality only).

Deliberately kept from math-verify: a ratio `2:3` ≡ `\\frac23` (a ratio is its quotient;
MATH asks for ratios "as a common fraction"); a bare list `1, 3` ≡ `\\{1, 3\\}` ≡ `3, 1`
(the golds list solution sets that way); `x = 3` ≡ `3`; `1\\frac45` is a mixed number.

`equivalence_classes` labels each answer with a class: each new answer is compared with
one representative per existing class, in order, and joins the first it equals.
Equivalence with percentages is not transitive (`50\\%` ≡ `50` and ≡ `\\frac12`, but
`50` ≢ `\\frac12`), so with such answers the classes depend on sample order.
"""

from __future__ import annotations

import atexit
import logging
from functools import lru_cache
from typing import Sequence

from dots.scoring.normalize import normalize, shape, to_latex
from dots.scoring.numbers import numbers_equal, read_number
from dots.scoring.worker import COMPARE_TIMEOUT_S, Helper

__all__ = ["answers_equivalent", "equivalence_classes", "helper", "verified_equal"]

log = logging.getLogger(__name__)

MAX_LATEX_CHARS = 1000

helper = Helper()  # the process that runs math-verify, restarted when a comparison hangs
atexit.register(helper.close)


@lru_cache(maxsize=100_000)
def verified_equal(a: str, b: str) -> bool:
    """Cached helper-process comparison (arguments sorted by the caller: it is symmetric)."""
    try:
        return helper.equal(a, b, COMPARE_TIMEOUT_S)
    except RuntimeError as exc:  # the helper cannot start: string equality only
        log.warning("%s; answers compared as strings", exc)
        return False


def _equivalent(a: str, b: str) -> bool:
    """Steps 2-4 of the module docstring for two answers whose normalised strings differ."""
    na, nb = read_number(a), read_number(b)
    if na is not None and nb is not None:
        return numbers_equal(na, nb)
    if {shape(a), shape(b)} == {"set", "tuple"}:
        return False
    la, lb = to_latex(a), to_latex(b)
    if not la or not lb or max(len(la), len(lb)) > MAX_LATEX_CHARS:
        return False
    if la == lb:
        return True
    return verified_equal(*sorted((la, lb)))


def equivalence_classes(answers: Sequence[str | None]) -> list[int | None]:
    """Label each answer with its equivalence class (None: no answer); see the module docstring."""
    labels: list[int | None] = []
    reps: list[str] = []  # one answer per class
    by_norm: dict[str, int] = {}
    for ans in answers:
        if ans is None or not str(ans).strip():
            labels.append(None)
            continue
        text = str(ans)
        norm = normalize(text)
        if norm not in by_norm:
            label = next((k for k, rep in enumerate(reps) if _equivalent(rep, text)), None)
            if label is None:
                label = len(reps)
                reps.append(text)
            by_norm[norm] = label
        labels.append(by_norm[norm])
    return labels


def answers_equivalent(a: str | None, b: str | None) -> bool:
    """Whether two extracted answers are the same mathematical answer (no answer: never)."""
    if a is None or b is None or not str(a).strip() or not str(b).strip():
        return False
    return normalize(str(a)) == normalize(str(b)) or _equivalent(str(a), str(b))
