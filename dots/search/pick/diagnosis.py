"""What the search says about its own pick, without a label (docs/search.md, "When the pick
looks wrong").

Both objectives can favour the base model: it repeats its own systematic mistakes
consistently, and the prompts' perplexity is lowest under the model pretrained on them. Two
label-free signs of that, each one line at the end of a search, in result.yaml and on the card:
- the pick lies next to θ0: every |λ| ≤ NEAR_BASE;
- the pick agrees with the sources' majority answers less often than the sources agree with
  each other: with a(M, N) the share of selected queries where models M and N give the same
  majority answer, warn when mean_i a(pick, i) < mean_{i<j} a(i, j). A merge better than both
  sources should side with one of them wherever they differ and with both where they agree.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from dots.io.jsonl import json_lines
from dots.options.study import DEFAULT_RANGE
from dots.scoring.equivalence import answers_equivalent

__all__ = ["NEAR_BASE", "agreement", "diagnose_pick", "same_answer", "source_answers"]

NEAR_BASE = 0.1  # a λ this small moves the model a tenth of the way along a task vector
DEFAULT = f"search.range=[{DEFAULT_RANGE[0]},{DEFAULT_RANGE[1]}] (the default)"

Answers = Mapping[str, Optional[str]]  # query id -> majority answer


def flat_coefficients(coefficients: Mapping[str, Any]) -> list[float]:
    """Every λ of a pick: one per source, or one per source and module group."""
    values: list[float] = []
    for value in coefficients.values():
        values += flat_coefficients(value) if isinstance(value, Mapping) else [float(value)]
    return values


def source_answers(record: Path) -> dict[str, dict[str, str | None]]:
    """source -> query id -> majority answer, from the selection's difficulty record (rows
    written before answers were recorded are skipped)."""
    found: dict[str, dict[str, str | None]] = {}
    for row in json_lines(record):
        if isinstance(row, dict) and "answer" in row:
            found.setdefault(str(row["source"]), {})[str(row["id"])] = row["answer"]
    return found


def agreement(a: Answers, b: Answers, ids: Sequence[str], same: Callable[[str, str], bool]) -> float:
    """Share of `ids` where both models have an answer and the answers are the same."""
    hits = 0
    for q in ids:
        x, y = a.get(q), b.get(q)
        hits += x is not None and y is not None and same(x, y)
    return hits / len(ids)


def same_answer(mode: str) -> Callable[[str, str], bool]:
    """Equality of two majority answers: equivalence (math) or the same letter (choice)."""
    return answers_equivalent if mode == "math" else (lambda x, y: x == y)


def diagnose_pick(
    coefficients: Mapping[str, Any],
    pick_answers: Answers | None,
    sources: Mapping[str, Answers],
    mode: str = "math",
    *,
    range_low: float,
) -> list[str]:
    """The warnings of a pick (none when it looks sound or cannot be checked), each one line
    ending with the next thing to try (the default range [0.5, 2.0] only when the search's
    lower bound `range_low` was below it)."""
    warnings = []
    lams = flat_coefficients(coefficients)
    wider = range_low < DEFAULT_RANGE[0]
    if lams and max(abs(x) for x in lams) <= NEAR_BASE:
        shown = ", ".join(f"{x:.2f}" for x in lams)
        warnings.append(
            f"the pick (λ = {shown}) lies next to the base model: consistency and perplexity can both favour "
            "the base's own answers; "
            + (f"keep λ away from 0 with {DEFAULT} and " if wider else "")
            + "compare the pick with the sources on a labelled set (python -m dots.evaluate)"
        )
    if pick_answers and len(sources) >= 2:
        ids = [q for q in pick_answers if all(q in answers for answers in sources.values())]
        if ids:
            same = same_answer(mode)
            pick_rate = sum(agreement(pick_answers, s, ids, same) for s in sources.values()) / len(sources)
            pairs = list(itertools.combinations(sources.values(), 2))
            source_rate = sum(agreement(a, b, ids, same) for a, b in pairs) / len(pairs)
            if pick_rate < source_rate:
                warnings.append(
                    f"the pick agrees with the sources' majority answers on {pick_rate:.0%} of the {len(ids)} "
                    f"selected queries, less than the sources agree with each other ({source_rate:.0%}): it may "
                    "repeat answers neither source gives; compare it with the sources on a labelled set "
                    "(python -m dots.evaluate) before using it" + (f", or search with {DEFAULT}" if wider else "")
                )
    return warnings


def pick_warnings(
    study: Any, result: dict, selected: Sequence[str], sources: Mapping[str, Answers], mode: str, range_low: float
) -> list[str]:
    """The warnings (`diagnose_pick`) of the pick in `result`: its trial's majority answers on the
    `selected` queries against the sources' (`source_answers` of the selection's difficulty record)."""
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == result["trial"])
    answers = trial.user_attrs.get("majority_answers")
    pick_answers = dict(zip(selected, answers)) if answers and len(answers) == len(selected) else None
    return diagnose_pick(result["coefficients"], pick_answers, sources, mode, range_low=range_low)
