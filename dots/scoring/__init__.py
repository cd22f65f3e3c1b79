"""Scoring answers and models — the public grading API of dots.

    from dots.scoring import is_correct, equivalence_classes, consistency
    is_correct("... so the answer is \\boxed{\\frac{1}{2}}", "0.5")        # True
    equivalence_classes(["1/2", "0.5", "2", None])                         # [0, 0, 1, None]

- `extract_answer` / `extract_choice`: the final answer of a completion;
- `equivalence_classes` / `answers_equivalent`: mathematical equivalence (math-verify);
- `consistency`: DoTS Eq. 4 for a query's samples; `is_correct`: SPEC §7 correctness;
- `perplexity`: exp of the mean token NLL; `format_prompt`: the SPEC §8 templates.
"""

from dots.scoring.equivalence import answers_equivalent, equivalence_classes
from dots.scoring.extract import extract_answer, extract_choice
from dots.scoring.grade import consistency, consistency_of_labels, is_correct, majority_answer
from dots.scoring.perplexity import PromptNLL, perplexity
from dots.scoring.prompts import format_prompt

__all__ = [
    "PromptNLL",
    "answers_equivalent",
    "consistency",
    "consistency_of_labels",
    "equivalence_classes",
    "extract_answer",
    "extract_choice",
    "format_prompt",
    "is_correct",
    "majority_answer",
    "perplexity",
]
