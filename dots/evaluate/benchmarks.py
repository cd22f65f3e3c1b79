"""Benchmark definitions (conf/benchmark/*.yaml) and their problems (docs/method.md §7).

A definition names where the problems come from (`data`), how they are scored (`metric`
avg@K or pass@K, `mode` math or choice) and how they are sampled (temperature, top_p,
max_tokens, prompt template; null = the backbone's). Data kinds:

- `parquet` / `jsonl`: a verl/LUFFY file (`prompt` chat messages, `reward_model.ground_truth`,
  `data_source`, filtered by `data_sources`) or any file with question/answer columns;
- `hub`: a Hugging Face dataset (`path`, `subset`, `split`);
- `lab`: the lab's labeled test split (`skills`), dots.lab.tasks.test_problems.

Records become problems through a `format`: `qa` (question/answer columns; the verl layout
is the default column choice) or a multiple-choice layout — `arc` (ARC-Challenge), `gpqa`
(GPQA: options shuffled with a seed per question, since the correct one comes first in
the files), `mmlu_pro` (MMLU-Pro) or `choices` (generic: a list column of options and a
letter/index answer). Options are shown as `A. …` lines followed by `instruction`.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from dots.checks import number_in, positive_int, whole_number
from dots.errors import DotsError
from dots.evaluate.metrics import MODES, Metric, parse_metric
from dots.io.problems import Query, limit_queries, load_pool, read_records, records_to_queries, unique_ids
from dots.options.evaluate import benchmark_spec

__all__ = ["Benchmark", "choice_question", "load_problems", "resolve_benchmark"]

KINDS = ("parquet", "jsonl", "hub", "lab")
FORMATS = ("qa", "arc", "gpqa", "mmlu_pro", "choices")
CHOICE_INSTRUCTION = "Answer with the letter of the correct option in \\boxed{}."
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Benchmark:
    """One resolved benchmark definition (conf/benchmark/<name>.yaml plus overrides)."""

    name: str
    data: dict
    metric: str = "pass@1"
    samples: int | None = None  # completions per problem; null = K of the metric
    mode: str = "math"  # math (math-verify) | choice (option letter)
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int | None = None  # null = the backbone's max_tokens
    prompt: str | None = None  # null = the backbone's template (docs/method.md §8)
    system_prompt: str | None = None  # null = the template's own (DoTS App. A.4)
    limit: int | None = None  # evaluate a seeded sample of this many problems
    seed: int = 0  # for `limit` and GPQA's option order
    description: str = ""

    @property
    def parsed_metric(self) -> Metric:
        return parse_metric(self.metric, self.samples)

    def identity(self) -> dict:
        """Everything the samples depend on (the samples file's key)."""
        return {k: v for k, v in asdict(self).items() if k != "description"}


def benchmark_from_spec(spec: Mapping[str, Any]) -> Benchmark:
    """A checked Benchmark from a resolved definition (`dots.options.evaluate.benchmark_spec`)."""
    if not isinstance(spec.get("data"), Mapping):
        raise DotsError(f"benchmark {spec['name']}: `data` must be a mapping with a `kind` ({', '.join(KINDS)})")
    known = set(Benchmark.__dataclass_fields__)
    unknown = sorted(set(spec) - known)
    if unknown:
        raise DotsError(f"benchmark {spec['name']}: unknown field(s) {unknown}; known: {sorted(known)}")
    bench = Benchmark(**spec)
    validate(bench)
    return bench


def resolve_benchmark(
    entry: str | Mapping,
    context: Mapping | Any = None,
    overrides: Mapping | None = None,
    dirs: Sequence[str | Path] = (),
    defaults: Mapping | None = None,
) -> Benchmark:
    """A Benchmark from a name (definition file) or an inline mapping, with `overrides` on top,
    interpolations resolved in the run's config `context` and null fields filled from `defaults`
    (`dots.options.evaluate.benchmark_spec`), then checked."""
    return benchmark_from_spec(benchmark_spec(entry, context, overrides, dirs, defaults))


def validate(bench: Benchmark) -> None:
    parse_metric(bench.metric, bench.samples)
    if bench.mode not in MODES:
        raise DotsError(f"benchmark {bench.name}: unknown mode {bench.mode!r}; choose one of {', '.join(MODES)}")
    kind = bench.data.get("kind")
    if kind not in KINDS:
        raise DotsError(f"benchmark {bench.name}: unknown data kind {kind!r}; choose one of {', '.join(KINDS)}")
    fmt = bench.data.get("format", "qa")
    if fmt not in FORMATS:
        raise DotsError(f"benchmark {bench.name}: unknown data format {fmt!r}; choose one of {', '.join(FORMATS)}")
    where = f"benchmark {bench.name}:"
    positive_int(bench.max_tokens, f"{where} max_tokens")
    number_in(bench.temperature, f"{where} temperature", 0.0, math.inf, high_open=True)
    number_in(bench.top_p, f"{where} top_p", 0.0, 1.0, low_open=True)
    if bench.limit is not None:
        positive_int(bench.limit, f"{where} limit")
    if bench.samples is not None:
        positive_int(bench.samples, f"{where} samples")
    whole_number(bench.seed, f"{where} seed")


# --- records → problems ---------------------------------------------------------------------


def choice_question(stem: str, options: Sequence[str], instruction: str = CHOICE_INSTRUCTION) -> str:
    """The question text of a multiple-choice problem: stem, `A. option` lines, instruction."""
    if len(options) > len(LETTERS):
        raise DotsError(f"a multiple-choice question has {len(options)} options; at most {len(LETTERS)}")
    lines = [str(stem).strip(), ""] + [f"{LETTERS[i]}. {str(opt).strip()}" for i, opt in enumerate(options)]
    text = "\n".join(lines)
    return f"{text}\n\n{instruction}" if instruction else text


def _letter_answer(answer: Any, n_options: int, where: str) -> str:
    """A letter from an answer given as a letter, `(B)`, or a 0-based index."""
    if isinstance(answer, bool):
        raise DotsError(f"{where}: answer {answer!r} is neither a letter nor an index")
    if isinstance(answer, int) or (isinstance(answer, str) and answer.strip().isdigit()):
        index = int(answer)
    else:
        text = str(answer).strip().strip("()").strip().upper()
        index = LETTERS.find(text) if len(text) == 1 else -1
    if not 0 <= index < n_options:
        raise DotsError(f"{where}: answer {answer!r} is not one of the {n_options} options")
    return LETTERS[index]


def _record_id(rec: Mapping, keys: Sequence[str], fallback: int) -> str:
    for key in keys:
        if rec.get(key) is not None:
            return str(rec[key])
    return str(fallback)


def choice_problems(records: Sequence[Mapping], data: Mapping, bench: str, seed: int) -> list[Query]:
    """Multiple-choice records (arc | gpqa | mmlu_pro | choices) → problems with a letter answer."""
    fmt = data.get("format")
    instruction = data.get("instruction", CHOICE_INSTRUCTION)
    out: list[Query] = []
    for i, rec in enumerate(records):
        where = f"{bench} record {i}"
        try:
            if fmt == "arc":
                labels = [str(x) for x in rec["choices"]["label"]]
                options = list(rec["choices"]["text"])
                key = str(rec["answerKey"])
                if key not in labels:
                    raise DotsError(f"{where}: answerKey {key!r} is not among the labels {labels}")
                stem, gold, rid = rec["question"], LETTERS[labels.index(key)], _record_id(rec, ["id"], i)
            elif fmt == "gpqa":
                rid = _record_id(rec, ["Record ID", "id"], i)
                correct = str(rec["Correct Answer"]).strip()
                options = [correct] + [str(rec[f"Incorrect Answer {j}"]).strip() for j in (1, 2, 3)]
                order = list(range(len(options)))
                random.Random(f"{seed}:{rid}").shuffle(order)  # the files list the correct answer first
                options = [options[j] for j in order]
                stem, gold = rec["Question"], LETTERS[order.index(0)]
            elif fmt == "mmlu_pro":
                options = [o for o in rec["options"] if str(o).strip() not in ("", "N/A")]
                gold = _letter_answer(
                    rec["answer_index"] if rec.get("answer_index") is not None else rec["answer"], len(options), where
                )
                stem, rid = rec["question"], _record_id(rec, ["question_id", "id"], i)
            else:  # generic `choices`
                options = list(rec[data.get("choices_key", "choices")])
                gold = _letter_answer(rec[data.get("answer_key", "answer")], len(options), where)
                stem, rid = rec[data.get("question_key", "question")], _record_id(rec, ["id"], i)
        except KeyError as exc:
            raise DotsError(f"{where}: no column {exc.args[0]!r} for format {fmt}") from None
        source = str(rec.get(data.get("source_key", "data_source")) or bench)
        out.append(Query(f"{bench}-{rid}", choice_question(stem, options, instruction), gold, source))
    return out


def load_problems(bench: Benchmark) -> list[Query]:
    """The problems of a benchmark (each with a gold answer), filtered and limited."""
    data = dict(bench.data)
    fmt = data.get("format", "qa")
    if data["kind"] == "lab":
        problems = load_pool({**data, "limit": None})
    elif fmt == "qa" and data["kind"] in ("parquet", "jsonl"):
        defaults = {"question_key": "prompt", "answer_key": "reward_model.ground_truth", "source_key": "data_source"}
        if data["kind"] == "jsonl":
            defaults = {"question_key": "question", "answer_key": "answer", "source_key": "source"}
        problems = load_pool({**defaults, **data, "limit": None, "data_sources": None})
    elif fmt == "qa":
        records = read_records(data, f"benchmark {bench.name}", "test")
        cols = {
            "question_key": data.get("question_key", "problem"),
            "answer_key": data.get("answer_key", "answer"),
            "source_key": data.get("source_key", "source"),
        }
        problems = records_to_queries(records, cols, bench.name, "data") if records else []
    else:
        problems = choice_problems(
            read_records(data, f"benchmark {bench.name}", "test"), data, bench.name, int(bench.seed)
        )
    sources = data.get("data_sources")
    if sources:
        wanted = {str(s) for s in sources}
        problems = [p for p in problems if p.source in wanted]
    if not problems:
        raise DotsError(
            f"benchmark {bench.name}: no problem in its data"
            + (f" from data sources {sorted(map(str, sources))}" if sources else "")
        )
    missing = [p.id for p in problems if p.answer is None or not str(p.answer).strip()]
    if missing:
        raise DotsError(f"benchmark {bench.name}: {len(missing)} problem(s) have no gold answer, e.g. {missing[0]}")
    return unique_ids(limit_queries(problems, bench.limit, int(bench.seed)))
