"""The confirmation stage (docs/method.md §5): before the pick, the pick rule's top candidates are
scored again with fresh samples, and the pick is made on those estimates.

A search's best C is the maximum of noisy estimates, so it is biased towards the trial whose
samples were lucky (the winner's curse). Samples drawn after the candidates were chosen are
independent of that choice: their C is an unbiased estimate for every candidate, with a 95%
interval over the queries (mean ± 1.96·sd/√n of the per-query consistencies). The pick is the
candidate with the highest confirmed C; ties keep the rule's order. Each candidate's result is
appended to `confirm.partial.jsonl` as it finishes, so a killed confirmation resumes there.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from dots.io.jsonl import json_lines
from dots.options.pick import ConfirmOptions
from dots.options.study import StudyOptions
from dots.search.pick.pareto import Point
from dots.search.study.scorer import trial_seed

__all__ = [
    "CONFIRM_SEED",
    "confirm_candidates",
    "confirm_options",
    "confirmed_choice",
    "held_out",
    "interval_of",
    "PARTIAL",
]

CONFIRM_SEED = 10_000_019  # candidate i: trial_seed(seed + CONFIRM_SEED, i, search.seeds), never a trial's seed
PARTIAL = "confirm.partial.jsonl"


def interval_of(per_query: Sequence[float]) -> list[float]:
    """95% interval of a mean over queries: mean ± 1.96·sd/√n."""
    n = len(per_query)
    mean = sum(per_query) / n
    if n < 2:
        return [mean, mean]
    sd = math.sqrt(sum((v - mean) ** 2 for v in per_query) / (n - 1))
    return [mean - 1.96 * sd / math.sqrt(n), mean + 1.96 * sd / math.sqrt(n)]


def held_out(ids: Sequence[str], selected: Sequence[str], n: int, seed: int) -> list[str]:
    """`n` pool query ids outside the selection, drawn with `seed` (all of them when fewer remain)."""
    chosen = set(selected)
    rest = sorted(q for q in ids if q not in chosen)
    return sorted(random.Random(seed).sample(rest, min(n, len(rest))))


def confirm_options(search: StudyOptions, options: ConfirmOptions) -> StudyOptions:
    """The study's scoring options with the confirmation's k, every query scored in one call (no
    pruning); adaptive sampling as the search had it."""
    return replace(search, k=options.k, prune=False, batch=None)


def confirm_candidates(
    score: Callable[[Any, int], Any],
    candidates: Sequence[Point],
    seed: int,
    run_dir: Path,
    key: str,
    seeds: str = "per_trial",
) -> list[dict]:
    """Each candidate scored by `score(coefficients, seed)` (a Scorer set to the confirmation's
    queries and k), in rank order, with fresh draws common to the candidates or one stream each
    (`seeds`, as the search's trials); rows already in the partial file under this `key` are reused."""
    done = read_partial(run_dir / PARTIAL, key)
    rows = []
    for i, p in enumerate(candidates):
        if i < len(done) and done[i]["trial"] == p.number:
            rows.append(done[i])
            continue
        res = score(dict(p.params), trial_seed(seed + CONFIRM_SEED, i, seeds))
        row = {
            "trial": p.number,
            "rank": i,
            "coefficients": json.loads(json.dumps(dict(p.params))),
            "search": {"consistency": p.consistency, "perplexity": p.perplexity},
            "consistency": res.consistency,
            "interval": interval_of(res.per_query),
            "perplexity": res.perplexity,
            "tokens": res.tokens,
            "samples": res.samples,
        }
        rows.append(row)
        with open(run_dir / PARTIAL, "a", encoding="utf-8") as fh:  # resumes after this candidate
            fh.write(json.dumps({"key": key, **row}) + "\n")
    return rows


def read_partial(path: Path, key: str) -> list[dict]:
    """The rows of an interrupted confirmation with this key, in order (a torn last line dropped)."""
    rows: list[dict] = []
    for row in json_lines(path):
        if row is None:  # a torn line: the rows up to it
            break
        if isinstance(row, dict) and row.get("key") == key and row.get("rank") == len(rows):
            rows.append({k: v for k, v in row.items() if k != "key"})
    return rows


def confirmed_choice(rows: Sequence[dict]) -> dict:
    """The confirmed pick: highest fresh C, ties → the rule's rank."""
    return min(rows, key=lambda r: (-r["consistency"], r["rank"]))
