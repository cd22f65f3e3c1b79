"""Difficulty-aware selection of adaptation queries (DoTS §4.2, docs/method.md §3).

For each candidate x, m answers are sampled from every source model θ_i;
C_θi(x) = max_y (1/m)·#{samples ≡ y} (Eq. 4) and D(x) = 1 − mean_i C_θi(x) (Eq. 5).
Queries with D > 1 − 1/m are dropped; the rest is split at the median of D into a low
pool (D <= median) and a medium pool, and n queries are drawn, `easy_fraction` from
the low pool. Per-source consistencies are appended to `difficulty.jsonl` as they are
computed, so an interrupted selection resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dots.errors import DotsError
from dots.io.commit import atomic_file
from dots.io.jsonl import json_lines
from dots.io.problems import Query
from dots.options.selection import SelectionConfig
from dots.runtime.progress import progress_bar
from dots.scoring.grade import consistency_and_majority
from dots.scoring.sampling import Sampling

__all__ = ["SelectionConfig", "choose", "load_selection", "random_selection", "save_selection", "score_difficulty"]

log = logging.getLogger(__name__)


@dataclass
class Selection:
    queries: list[Query]
    difficulty: dict[str, float] = field(default_factory=dict)
    consistency: dict[str, dict[str, float]] = field(default_factory=dict)  # id -> source -> C
    pools: dict[str, str] = field(default_factory=dict)  # id -> low | medium
    notes: list[str] = field(default_factory=list)


def _score_source(
    source: str,
    queries: Sequence[Query],
    prompts: Mapping[str, str],
    generate: Callable[..., list[list[str]]],
    cfg: SelectionConfig,
    done: dict[str, float],
    record: Path,
    mode: str,
    rule: str,
) -> None:
    todo = [q for q in queries if q.id not in done]
    batches = [todo[i : i + cfg.batch] for i in range(0, len(todo), cfg.batch)]
    for b, batch in enumerate(progress_bar(batches, f"difficulty · {source}")):
        sampling = Sampling(
            n=cfg.m, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed + b
        )
        outs = generate([prompts[q.id] for q in batch], sampling)
        with open(record, "a") as fh:
            for q, samples in zip(batch, outs):
                done[q.id], answer = consistency_and_majority(samples, mode, rule)
                row = {"source": source, "id": q.id, "consistency": done[q.id], "answer": answer}
                fh.write(json.dumps(row) + "\n")  # the answer: the pick's check (dots.search.pick.diagnosis)


def score_difficulty(
    queries: Sequence[Query],
    prompts: Mapping[str, str],
    activate: Mapping[str, Callable[[], None]],
    generate: Callable[..., list[list[str]]],
    cfg: SelectionConfig,
    record: Path,
    mode: str = "math",
    rule: str = "majority",
) -> dict[str, dict[str, float]]:
    """C_θi(x) for every source i (activate[i]() loads it into the engine) and query x.

    `record` is a jsonl file keyed by the inputs (its name carries their hash): rows found
    there are reused, new ones appended as each batch finishes."""
    known: dict[str, dict[str, float]] = {s: {} for s in activate}
    wanted = {q.id for q in queries}
    for row in json_lines(record):
        if row is not None and row["source"] in known and row["id"] in wanted:  # None: a line cut by a kill
            known[row["source"]][row["id"]] = row["consistency"]
    for source, load in activate.items():
        if all(q.id in known[source] for q in queries):
            continue
        load()
        _score_source(source, queries, prompts, generate, cfg, known[source], record, mode, rule)
    return {q.id: {s: known[s][q.id] for s in activate} for q in queries}


def _split(kept: list[str], difficulty: Mapping[str, float], median: float, rule: str) -> tuple[list[str], list[str]]:
    """The low and medium pools (each sorted by id): D ≤ median, or the first ⌊N/2⌋ by D
    (stable: pool order among equal D)."""
    if rule == "half":
        ordered = sorted(kept, key=lambda q: difficulty[q])  # `kept` is in pool order
        half = len(ordered) // 2
        return sorted(ordered[:half]), sorted(ordered[half:])
    return sorted(q for q in kept if difficulty[q] <= median), sorted(q for q in kept if difficulty[q] > median)


def choose(queries: Sequence[Query], per_source: Mapping[str, Mapping[str, float]], cfg: SelectionConfig) -> Selection:
    """Filter by difficulty, split at the median, draw n (docs/method.md §3)."""
    rng = random.Random(cfg.seed)
    by_id = {q.id: q for q in queries}
    difficulty = {qid: 1.0 - statistics.fmean(c.values()) for qid, c in per_source.items()}
    kept = [qid for qid in by_id if difficulty[qid] <= cfg.drop_above + 1e-12]
    if not kept:
        raise DotsError(
            f"every query was filtered: all {len(queries)} candidates have difficulty D > {cfg.drop_above:.3f} "
            f"(no source answers them consistently); raise selection.threshold or use an easier pool"
        )
    median = statistics.median(difficulty[q] for q in kept)
    low, medium = _split(kept, difficulty, median, cfg.split)
    notes = [
        f"{len(queries)} candidates, {len(queries) - len(kept)} dropped with D > {cfg.drop_above:.3f}, "
        f"median D {median:.3f}, split {cfg.split}: {len(low)} low, {len(medium)} medium"
    ]
    n = min(cfg.n, len(kept))
    if n < cfg.n:
        notes.append(f"only {len(kept)} queries survive the filter; selecting {n} instead of {cfg.n}")
    want_low = {"balanced": round(cfg.easy_fraction * n), "easy": n, "medium": 0}[cfg.strategy]
    take_low = min(want_low, len(low))
    take_medium = min(n - take_low, len(medium))
    if take_low + take_medium < n:  # a pool is short: fill from the other
        take_low = min(len(low), n - take_medium)
    if take_low != want_low:
        notes.append(f"low pool gave {take_low} instead of {want_low}; filled from the other pool")
    chosen = rng.sample(low, take_low) + rng.sample(medium, take_medium)
    pools = {q: ("low" if q in set(low) else "medium") for q in chosen}
    for note in notes:
        log.info("selection: %s", note)
    return Selection(
        [by_id[q] for q in sorted(chosen)],
        {q: difficulty[q] for q in by_id},
        {q: dict(c) for q, c in per_source.items()},
        pools,
        notes,
    )


def random_selection(queries: Sequence[Query], cfg: SelectionConfig) -> Selection:
    """The `random` ablation: n queries drawn without looking at difficulty."""
    rng = random.Random(cfg.seed)
    chosen = rng.sample(list(queries), min(cfg.n, len(queries)))
    return Selection(sorted(chosen, key=lambda q: q.id), notes=[f"random draw of {len(chosen)} of {len(queries)}"])


def save_selection(selection: Selection, path: Path, key: str) -> None:
    """selection.jsonl: one line per chosen query (consistency per source, difficulty, pool)."""
    with atomic_file(path) as tmp, open(tmp, "w") as fh:
        fh.write(json.dumps({"key": key, "notes": selection.notes}) + "\n")
        for q in selection.queries:
            fh.write(
                json.dumps(
                    {
                        "id": q.id,
                        "question": q.question,
                        "answer": q.answer,
                        "source": q.source,
                        "consistency": selection.consistency.get(q.id),
                        "difficulty": selection.difficulty.get(q.id),
                        "pool": selection.pools.get(q.id),
                    }
                )
                + "\n"
            )


class DamagedSelection(DotsError):
    """selection.jsonl cannot be read back (cut mid-line, edited); `intact_ids` are the query ids
    of the rows before the damage."""

    def __init__(self, path: Path, line: int, intact_ids: list[str]):
        super().__init__(f"{path} is damaged at line {line}")
        self.intact_ids = intact_ids


def load_selection(path: Path, key: str) -> Selection | None:
    """The saved selection if it was made from the same inputs (same key), else None; a file
    that cannot be parsed raises DamagedSelection."""
    if not path.exists():
        return None
    lines = path.read_text(errors="replace").splitlines()
    rows: list[dict] = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            if number > 1 and not {"id", "question", "answer", "source"} <= set(row):
                raise ValueError("a row without its fields")
        except (ValueError, TypeError):
            raise DamagedSelection(path, number, [str(r.get("id")) for r in rows[1:]]) from None
        rows.append(row)
    if not rows:
        raise DamagedSelection(path, 1, [])
    head, rows = rows[0], rows[1:]
    if head.get("key") != key:
        return None
    queries = [Query(r["id"], r["question"], r["answer"], r["source"]) for r in rows]
    return Selection(
        queries,
        {r["id"]: r["difficulty"] for r in rows if r["difficulty"] is not None},
        {r["id"]: r["consistency"] for r in rows if r["consistency"]},
        {r["id"]: r["pool"] for r in rows if r["pool"]},
        head.get("notes", []),
    )
