"""Ground truth for the lab: accuracy and answer consistency of any Engine on lab problems.

Accuracy is avg@n: the share of the n samples per problem whose last `\\boxed{}` holds
the right integer, averaged over problems (greedy when temperature is 0). Consistency is
docs/method.md §3's C(x) = max_y (1/n)·#{samples with answer y}; samples without an answer never
form the majority, so a problem whose samples have no answer gets C = 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from dots.lab.tasks import extract_answer
from dots.scoring.grade import consistency_of_labels
from dots.scoring.sampling import Sampling

__all__ = ["accuracy"]


def accuracy(
    engine,
    problems: Sequence[dict],
    n: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 32,
    seed: int = 0,
    top_p: float = 1.0,
    details: bool = False,
) -> dict:
    """Per-skill and overall accuracy (`all`) plus mean consistency of `engine` on lab records.

    `problems` are records {id, question, answer, skill} (dots.lab.tasks); `engine` is
    anything with the Engine protocol's `generate`. Returns {"all", <skill>..., "consistency",
    "problems", "samples"} and, with `details`, per-problem rows under "rows".
    """
    if not problems:
        raise ValueError("no problems to score")
    sampling = Sampling(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
    outs = engine.generate([p["question"] for p in problems], sampling)
    by_skill: dict[str, list[float]] = defaultdict(list)
    cons, rows = [], []
    for prob, samples in zip(problems, outs):
        gold = int(prob["answer"])
        answers = [extract_answer(s) for s in samples]
        acc = sum(a == gold for a in answers) / len(answers)
        by_skill[prob["skill"]].append(acc)
        by_skill["all"].append(acc)
        cons.append(consistency_of_labels(answers))
        if details:
            rows.append(
                {
                    "id": prob["id"],
                    "skill": prob["skill"],
                    "answer": gold,
                    "samples": list(samples),
                    "accuracy": acc,
                    "consistency": cons[-1],
                }
            )
    result: dict[str, Any] = {k: sum(v) / len(v) for k, v in by_skill.items()}
    result.update(consistency=sum(cons) / len(cons), problems=len(problems), samples=n)
    if details:
        result["rows"] = rows
    return result
