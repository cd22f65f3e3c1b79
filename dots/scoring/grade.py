"""Consistency (DoTS Eq. 4, docs/method.md §3) and correctness (docs/method.md §7) of completions.

Consistency: C = max_y (1/m)·#{samples ≡ y}; samples without an answer count in m but
never form the majority; all-no-answer gives 0. Correctness: the completion's answer
(`extract_answer`) is equivalent (`answers_equivalent`: numbers, then math-verify) to the
ground truth, or the option letter matches for multiple choice. Both use one definition
of "the same answer", so a benchmark score and the label-free objective never disagree
on whether two answers are equal. What counts as equal, and why: docs/grading.md.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from dots.scoring.equivalence import answers_equivalent, equivalence_classes
from dots.scoring.extract import DEFAULT_FALLBACKS, extract_answer, extract_choice, final_boxes, letter_of

__all__ = [
    "CONSISTENCY_RULES",
    "answer_labels",
    "consistency",
    "consistency_and_majority",
    "consistency_of_labels",
    "is_correct",
    "majority_answer",
]

# majority: no-answer samples never form the majority (docs/method.md §3); official: the
# most common class, first seen among ties, and 0 when that class is "no answer" (the
# official DoTS code's Counter.most_common; `preset=official`, docs/official.md)
CONSISTENCY_RULES = ("majority", "official")


def consistency_of_labels(labels: Sequence[int | str | None], rule: str = "majority") -> float:
    """max_y (1/m)·#{labels == y} over non-None labels; m counts every sample. Rule
    `official`: #{most common label}/m, 0 when the most common (first seen among ties) is None."""
    m = len(labels)
    if rule == "official":
        seen: dict[int | str | None, int] = {}
        for label in labels:
            seen[label] = seen.get(label, 0) + 1
        if not seen:
            return 0.0
        top = max(seen.values())
        first = next(label for label, count in seen.items() if count == top)  # insertion = first seen
        return 0.0 if first is None else top / m
    if rule != "majority":
        raise ValueError(f"consistency rule must be one of {CONSISTENCY_RULES}, got {rule!r}")
    counts: dict[int | str, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    return max(counts.values()) / m if counts and m else 0.0


def answer_labels(
    completions: Sequence[str],
    mode: str = "math",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
    letters: str = "ABCDEFGHIJ",
) -> list[int | str | None]:
    """The answer class of each completion (None: no answer): equivalence classes of the
    extracted answers (`mode` math) or the option letters (`mode` choice)."""
    if mode == "choice":
        return [extract_choice(c, letters) for c in completions]
    if mode != "math":
        raise ValueError(f"consistency mode must be 'math' or 'choice', got {mode!r}")
    return list(equivalence_classes([extract_answer(c, fallbacks) for c in completions]))


def consistency(
    completions: Sequence[str],
    mode: str = "math",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
    letters: str = "ABCDEFGHIJ",
    rule: str = "majority",
) -> float:
    """Eq. 4 for the m completions of one query; `mode` math (math-verify) or choice (letters),
    `rule` as in `consistency_of_labels`."""
    return consistency_of_labels(answer_labels(completions, mode, fallbacks, letters), rule)


def consistency_and_majority(
    completions: Sequence[str], mode: str = "math", rule: str = "majority", letters: str = "ABCDEFGHIJ"
) -> tuple[float, str | None]:
    """Eq. 4 (`consistency`) and a representative answer of the largest answered class (first
    seen among ties; None when no sample has an answer), from one extraction of the answers."""
    if mode == "choice":
        answers: list[str | None] = [extract_choice(c, letters) for c in completions]
        labels: list[int | str | None] = list(answers)
    elif mode == "math":
        answers = [extract_answer(c) for c in completions]
        labels = list(equivalence_classes(answers))
    else:
        raise ValueError(f"consistency mode must be 'math' or 'choice', got {mode!r}")
    counts: dict[int | str, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    best = max(counts, key=lambda k: (counts[k], -labels.index(k)), default=None)
    return consistency_of_labels(labels, rule), None if best is None else answers[labels.index(best)]


def majority_answer(completions: Sequence[str], fallbacks: Iterable[str] = DEFAULT_FALLBACKS) -> str | None:
    """A representative answer of the largest class (first seen among ties)."""
    answers = [extract_answer(c, fallbacks) for c in completions]
    labels = equivalence_classes(answers)
    counts: dict[int, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None
    best = max(counts, key=lambda k: (counts[k], -labels.index(k)))
    return answers[labels.index(best)]


def is_correct(
    completion: str,
    gold: str,
    mode: str = "math",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
    letters: str = "ABCDEFGHIJ",
) -> bool:
    """Whether one completion answers `gold` correctly (docs/method.md §7).

    `gold` is the ground truth as the benchmark writes it (`4.4e7`, `62.5%`, `$\\frac{1}{2}$`,
    or a solution whose last box is the answer). `mode` "math": the extracted answer is
    equivalent to it; "choice": the option letter matches. No extractable answer: False.
    """
    if mode == "choice":
        pred = extract_choice(completion, letters)
        gold_letter = letter_of(gold, letters) or gold.strip().upper()
        return pred is not None and pred == gold_letter
    pred = extract_answer(completion, fallbacks)
    if pred is None:
        return False
    gold_answer = final_boxes(gold) or gold
    return answers_equivalent(gold_answer, pred)
