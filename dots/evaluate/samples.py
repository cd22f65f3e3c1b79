"""Samples files: `samples/<model>/<benchmark>.jsonl`, a header with the key of everything
the samples depend on, then one row per problem (id, gold, completions, extracted answers,
correct flags, score), appended chunk by chunk, so an interrupted run resumes
mid-benchmark and a complete file is never recomputed."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, cast

from dots.evaluate.benchmarks import Benchmark
from dots.evaluate.metrics import aggregate, grade, problem_score
from dots.io.checkpoint import Checkpoint
from dots.io.commit import atomic_file
from dots.io.problems import Query
from dots.keys import stable_hash
from dots.scoring.prompts import format_prompt
from dots.scoring.sampling import Sampling

if TYPE_CHECKING:
    from dots.engines.base import Engine

log = logging.getLogger("dots.evaluate")


def samples_key(bench: Benchmark, problems: Sequence[Query], model: Checkpoint) -> str:
    """Hash of what a model × benchmark's samples depend on: settings, problems, weights' files."""

    return stable_hash(
        {
            "benchmark": bench.identity(),
            "problems": [[p.id, p.question, p.answer] for p in problems],
            "model": model.fingerprint(),
        }
    )


def read_samples(path: Path, key: str) -> dict[str, dict]:
    """Rows of a samples file written under `key` (empty when absent or stale); a torn last line is dropped."""
    if not path.is_file():
        return {}
    rows: dict[str, dict] = {}
    with open(path) as fh:
        lines = fh.read().splitlines()
    if not lines:
        return {}
    try:
        header = json.loads(lines[0]).get("header", {})
    except ValueError:
        return {}
    if header.get("key") != key:
        log.info("%s: settings, problems or model changed; recomputing", path)
        return {}
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except ValueError:
            break  # interrupted mid-write
        rows[row["id"]] = row
    return rows


def _rewrite(path: Path, header: dict, rows: Sequence[dict]) -> None:
    with atomic_file(path) as tmp, open(tmp, "w") as fh:
        fh.write(json.dumps({"header": header}) + "\n")
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def run_benchmark(
    engine: Engine,
    model: str,
    bench: Benchmark,
    problems: Sequence[Query],
    path: Path,
    key: str,
    chunk: int = 256,
    seed: int = 0,
) -> list[dict]:
    """Generate and grade what `path` lacks; returns every problem's row in problem order."""
    metric = bench.parsed_metric
    done = read_samples(path, key)
    todo = [(i, p) for i, p in enumerate(problems) if p.id not in done]
    if not todo:
        return [done[p.id] for p in problems]
    header = {
        "key": key,
        "model": model,
        "benchmark": bench.name,
        "metric": metric.name,
        "problems": len(problems),
        "samples": metric.n,
        "settings": bench.identity(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    _rewrite(path, header, [done[p.id] for p in problems if p.id in done])  # drops stale/torn lines
    tokenizer = getattr(engine, "tokenizer", None)
    # fixed chunk boundaries over the problem order: a resumed run draws the same seeds
    chunks: dict[int, list[tuple[int, Query]]] = {}
    for i, p in todo:
        chunks.setdefault(i // chunk, []).append((i, p))
    from dots.runtime.progress import new_progress

    with new_progress(f"{model} · {bench.name}") as bar, open(path, "a") as out:
        task = bar.add_task("problems", total=len(problems), completed=len(problems) - len(todo))
        for index, items in chunks.items():
            prompts = [
                format_prompt(p.question, cast(str, bench.prompt), tokenizer, bench.system_prompt) for _, p in items
            ]
            sampling = Sampling(
                n=metric.n,
                temperature=float(bench.temperature),
                top_p=float(bench.top_p),
                max_tokens=int(cast(int, bench.max_tokens)),  # validate() requires it
                seed=int(seed) + index,
            )
            outs = engine.generate(prompts, sampling)
            if len(outs) != len(items) or any(len(o) != metric.n for o in outs):
                raise RuntimeError(f"the engine returned {len(outs)} results for {len(items)} prompts")
            for (_, p), completions in zip(items, outs):
                answers, correct = grade(
                    completions,
                    str(p.answer),
                    bench.mode,
                    **({"letters": bench.data["letters"]} if "letters" in bench.data else {}),
                )
                row = {
                    "id": p.id,
                    "source": p.source,
                    "question": p.question,
                    "gold": p.answer,
                    "completions": list(completions),
                    "answers": answers,
                    "correct": correct,
                    "score": problem_score(correct, metric),
                }
                done[p.id] = row
                out.write(json.dumps(row) + "\n")
            out.flush()
            bar.advance(task, len(items))
    return [done[p.id] for p in problems]


def summarize(rows: Sequence[dict], bench: Benchmark) -> dict:
    """Benchmark score (mean over problems), its standard error, and the no-answer share."""
    result = aggregate(r["score"] for r in rows)
    answers = [a for r in rows for a in r["answers"]]
    result["no_answer"] = sum(a is None for a in answers) / len(answers) if answers else 0.0
    result["metric"] = bench.parsed_metric.name
    return result
