"""Scoring answers and models — the public grading API of dots (docs/grading.md).

    from dots.scoring import is_correct, equivalence_classes, extract_answer
    is_correct("<think>…</think> so the answer is \\boxed{4.4 \\times 10^{7}}", "4.4e7")  # True
    is_correct("<answer>62.5\\%</answer>", "62.5%")                                      # True
    equivalence_classes(["1/2", "0.5", "50\\%", "2", None])                             # [0, 0, 0, 1, None]

- `is_correct(completion, gold)`: docs/method.md §7 correctness of one completion;
- `equivalence_classes(answers)` / `answers_equivalent(a, b)`: the same mathematical
  answer (plain numbers read by dots, then math-verify under a per-comparison timeout);
- `extract_answer` / `extract_choice`: the final answer of a completion (`<answer>` tags,
  boxes, "the answer is" phrases; the Solution after `</think>` first);
- `consistency`: DoTS Eq. 4 for a query's samples; `majority_answer`;
- `perplexity`: exp of the mean token NLL; `format_prompt`: the docs/method.md §8 templates.
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
