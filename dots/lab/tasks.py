"""Synthetic verifiable tasks of the lab, their disjoint splits and the training corpora.

Skill A (`add`) is 2-digit addition, skill B (`sub`) 2-digit subtraction with a >= b.
Each skill's universe of 2-digit problems is partitioned once (by `tasks.split_seed`)
into test / pool / train; only the train split ever reaches a training stage.
Prompts use the lab's own plain format `"47+38="`; completions show the column-by-column
working, units first, and end in the boxed answer: `"7+8=15 4+3+1=8 \\boxed{85}"`.

The pretraining corpus is broad (1-3 digit operands, both operations) and carries a
systematic slip: on problems that need a carry (add) or a borrow (sub) in the units
column, each carry is forgotten with probability `slip_rate` (47+38: "7+8=15 4+3=7
\\boxed{75}"; 42-38: "12-8=4 4-3=1 \\boxed{14}"). The
base therefore knows both answers and prefers the slip; post-training must move it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from dots.lab.config import SKILLS, load_config

__all__ = ["split_problems", "test_problems"]

OPS = {"add": "+", "sub": "-"}
SPLITS = ("test", "pool", "train")


@dataclass(frozen=True)
class Problem:
    a: int
    b: int
    skill: str

    @property
    def prompt(self) -> str:
        return f"{self.a}{OPS[self.skill]}{self.b}="

    @property
    def answer(self) -> int:
        return self.a + self.b if self.skill == "add" else self.a - self.b

    @property
    def needs_carry(self) -> bool:
        """Carry (add) or borrow (sub) out of the units column."""
        ua, ub = self.a % 10, self.b % 10
        return ua + ub >= 10 if self.skill == "add" else ua < ub

    @property
    def slipped_answer(self) -> int:
        """The answer when every carry/borrow is forgotten (2-digit: off by 10 in the tens)."""
        return work(self, lambda col: True)[1]


def work(p: Problem, forget: Callable[[int], bool] | None = None) -> tuple[str, int]:
    """Column-by-column working, units first, and the answer it leads to.

    47+38: "7+8=15 4+3+1=8"; 42-38: "12-8=4 4-1-3=0". `forget(col)` is asked for each
    column that receives a carry/borrow; True writes the step without it (the slip).
    """
    xs, ys = str(p.a)[::-1], str(p.b)[::-1]
    steps, digits, carry = [], [], 0
    for col in range(max(len(xs), len(ys))):
        x = int(xs[col]) if col < len(xs) else 0
        y = int(ys[col]) if col < len(ys) else 0
        c = 0 if (carry and forget is not None and forget(col)) else carry
        if p.skill == "add":
            total = x + y + c
            steps.append(f"{x}+{y}{'+1' if c else ''}={total}")
            digits.append(total % 10)
            carry = total // 10
        else:
            borrow = int(x - c < y)
            top = x + 10 * borrow
            steps.append(f"{top}{'-1' if c else ''}-{y}={top - c - y}")
            digits.append(top - c - y)
            carry = borrow
    if p.skill == "add" and carry:
        digits.append(carry)
    answer = int("".join(map(str, digits[::-1])))
    return " ".join(steps), answer


def solution(p: Problem, forget: Callable[[int], bool] | None = None) -> str:
    """The completion the lab's models learn: the working, then the boxed answer."""
    steps, answer = work(p, forget)
    return f"{steps} {completion(answer)}"


def completion(answer: int) -> str:
    return f"\\boxed{{{answer}}}"


_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def extract_answer(text: str) -> int | None:
    """The integer inside the last `\\boxed{...}` of `text`, or None."""
    found = _BOXED.findall(text)
    if not found:
        return None
    try:
        return int(found[-1].strip())
    except ValueError:
        return None


def _universe(skill: str) -> list[Problem]:
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    if skill == "sub":
        pairs = [(a, b) for a, b in pairs if a >= b]
    return [Problem(a, b, skill) for a, b in pairs]


def split_problems(tasks: Mapping, skill: str) -> dict[str, list[Problem]]:
    """Disjoint test / pool / train splits of one skill's 2-digit problems."""
    if skill not in SKILLS:
        raise ValueError(f"unknown lab skill {skill!r} (known: {', '.join(SKILLS)})")
    problems = _universe(skill)
    random.Random(f"{tasks['split_seed']}:{skill}").shuffle(problems)
    n_test, n_pool = int(tasks["test_per_skill"]), int(tasks["pool_per_skill"])
    if n_test + n_pool >= len(problems):
        raise ValueError(f"test_per_skill + pool_per_skill must be < {len(problems)} for {skill}")
    return {
        "test": problems[:n_test],
        "pool": problems[n_test : n_test + n_pool],
        "train": problems[n_test + n_pool :],
    }


def records(tasks: Mapping, split: str, size: int | None = None, skills: Iterable[str] = SKILLS) -> list[dict]:
    """Records {id, question, answer, skill} of a split, skills interleaved; `size` caps the total."""
    if split not in SPLITS:
        raise ValueError(f"unknown lab split {split!r} (known: {', '.join(SPLITS)})")
    per_skill = [split_problems(tasks, s)[split] for s in skills]
    out = []
    for i in range(max(len(p) for p in per_skill)):
        for probs in per_skill:
            if i < len(probs):
                p = probs[i]
                out.append(
                    {
                        "id": f"lab-{split}-{p.skill}-{p.a}-{p.b}",
                        "question": p.prompt,
                        "answer": str(p.answer),
                        "skill": p.skill,
                    }
                )
    return out if size is None else out[: int(size)]


def _lab_tasks(cfg: Mapping | None) -> Mapping:
    overrides = list((cfg or {}).get("lab_overrides") or [])
    return load_config(overrides).tasks


def pool_queries(cfg: Mapping | None = None) -> list[dict]:
    """Unlabeled-pool queries (conf/pool/lab.yaml: split, size, skills, lab_overrides)."""
    cfg = cfg or {}
    return records(_lab_tasks(cfg), cfg.get("split", "pool"), cfg.get("size"), cfg.get("skills") or SKILLS)


def test_problems(cfg: Mapping | None = None) -> list[dict]:
    """The labeled test split (conf/backbone/lab.yaml `test_set`: size, skills, lab_overrides)."""
    cfg = cfg or {}
    return records(_lab_tasks(cfg), "test", cfg.get("size"), cfg.get("skills") or SKILLS)


# ---------------------------------------------------------------- training corpora
def _random_problem(rng: random.Random, skill: str, da: int, db: int) -> Problem:
    lo = lambda d: 0 if d == 1 else 10 ** (d - 1)  # noqa: E731
    a, b = rng.randint(lo(da), 10**da - 1), rng.randint(lo(db), 10**db - 1)
    if skill == "sub" and a < b:
        a, b = b, a
    return Problem(a, b, skill)


def pretraining_batch(rng: random.Random, tasks: Mapping, train: Mapping[str, list[Problem]], n: int) -> list[str]:
    """n texts of the broad pretraining mix (prompt + completion, with the systematic slip)."""
    digits = list(tasks["digits"])
    share2 = float(tasks["two_digit_share"])
    slip = float(tasks["slip_rate"])
    texts = []
    for _ in range(n):
        skill = rng.choice(SKILLS)
        if rng.random() < share2:
            p = rng.choice(train[skill])
        else:
            while True:
                da, db = rng.choice(digits), rng.choice(digits)
                if not (da == 2 and db == 2):
                    break
            p = _random_problem(rng, skill, da, db)
        texts.append(p.prompt + solution(p, lambda col: rng.random() < slip))
    return texts


def sft_examples(
    rng: random.Random, train: Mapping[str, list[Problem]], n: int, add_share: float
) -> list[tuple[str, str]]:
    """n (prompt, correct completion) pairs, `add_share` of them skill A, drawn without replacement."""
    n_add = round(n * add_share)
    picks = {"add": n_add, "sub": n - n_add}
    out = []
    for skill, k in picks.items():
        pool = train[skill]
        chosen = rng.sample(pool, min(k, len(pool)))
        while len(chosen) < k:  # more examples than train problems: cycle through them again
            chosen += rng.sample(pool, min(k - len(chosen), len(pool)))
        out += [(p.prompt, solution(p)) for p in chosen]
    rng.shuffle(out)
    return out
