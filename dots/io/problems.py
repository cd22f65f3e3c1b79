"""Problems and queries: the one loader of pools (search) and benchmarks (evaluation).

Sources: a verl/LUFFY parquet, jsonl, a Hub dataset, and pool kinds registered by what
makes their records (`register_pool_kind`: the lab registers `lab` when `dots.lab` is imported,
as every command's config does), so this low layer never imports the lab.

A pool is a list of `Query` (question text, and the gold answer when the file has one:
DoTS never uses it for the search, but SAR's Fisher and the evaluation do).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dots.errors import DotsError


@dataclass(frozen=True)
class Query:
    id: str
    question: str
    answer: str | None = None
    source: str = ""


# pool kinds beyond files and the Hub: kind → the records (id, question, answer, skill) of a pool config
POOL_KINDS: dict[str, Callable[[Any], list[dict]]] = {}


def register_pool_kind(kind: str, records: Callable[[Any], list[dict]]) -> None:
    """Let `load_pool` read pools of `kind` from `records(cfg)` (a list of dicts with id, question, answer, skill)."""
    POOL_KINDS[kind] = records


def _cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _dig(record: Mapping, dotted: str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return None
    return value


def question_from_messages(messages: Any) -> str | None:
    """The last user message of a chat (verl's `prompt` column); the system prompt is dropped
    because dots applies its own template (SPEC §8)."""
    if isinstance(messages, str):
        return messages
    users = [m.get("content") for m in list(messages) if isinstance(m, Mapping) and m.get("role") == "user"]
    return users[-1] if users else None


def records_to_queries(records: Sequence[Mapping], cfg: Any, origin: str) -> list[Query]:
    q_key = _cfg_get(cfg, "question_key", "prompt")
    a_key = _cfg_get(cfg, "answer_key", "reward_model.ground_truth")
    s_key = _cfg_get(cfg, "source_key", "data_source")
    out = []
    for i, rec in enumerate(records):
        question = question_from_messages(_dig(rec, q_key))
        if not question:
            raise DotsError(f"{origin}: record {i} has no question in column {q_key!r}")
        answer = _dig(rec, a_key)
        if isinstance(answer, (list, tuple)) and answer:
            answer = answer[0]
        source = _dig(rec, s_key) or origin
        rid = _dig(rec, "id") or _dig(rec, "extra_info.index")
        qid = f"{source}-{rid if rid is not None else i}"
        out.append(Query(str(qid), str(question), None if answer is None else str(answer), str(source)))
    return out


def read_records(spec: Any, origin: str, default_split: str = "train") -> list[dict]:
    """The raw records of a `kind: parquet | jsonl | hub` source (`path`; for hub also `subset`
    and `split`); `origin` names it in errors."""
    kind = _cfg_get(spec, "kind", "parquet")
    if kind == "hub":
        import datasets

        name = _cfg_get(spec, "path")
        try:
            ds = datasets.load_dataset(name, _cfg_get(spec, "subset"), split=_cfg_get(spec, "split", default_split))
        except Exception as exc:  # offline, gated, missing split, ...
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DotsError(f"{origin}: cannot load Hub dataset {name!r}: {first}") from None
        return [dict(r) for r in ds]
    path = Path(str(_cfg_get(spec, "path", ""))).expanduser()
    if not path.is_file():
        raise DotsError(f"{origin}: file does not exist: {path}")
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    rows = []
    with open(path) as fh:
        for line_no, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DotsError(f"{path}:{line_no}: not JSON ({exc.msg})") from None
    return rows


def limit_queries(queries: list[Query], limit: int | None, seed: int) -> list[Query]:
    """A seeded sample of `limit` queries, kept in their original order (all when fewer)."""
    if limit is None or len(queries) <= int(limit):
        return queries
    keep = set(random.Random(int(seed)).sample(range(len(queries)), int(limit)))
    return [q for i, q in enumerate(queries) if i in keep]


def unique_ids(queries: list[Query]) -> list[Query]:
    """The queries, with `#index` appended to every id when some id repeats."""
    ids = [q.id for q in queries]
    if len(set(ids)) == len(ids):
        return queries
    return [Query(f"{q.id}#{i}", q.question, q.answer, q.source) for i, q in enumerate(queries)]


def load_pool(cfg: Any) -> list[Query]:
    """Queries of a pool config: kind (parquet|jsonl|hub|a registered kind: lab), path, filters, limit, seed."""
    kind = _cfg_get(cfg, "kind", "parquet")
    if kind in POOL_KINDS:
        records = POOL_KINDS[kind](cfg)
        queries = [
            Query(str(r["id"]), str(r["question"]), str(r["answer"]), str(r.get("skill", kind))) for r in records
        ]
    elif kind in ("parquet", "jsonl", "hub"):
        origin = str(_cfg_get(cfg, "path", ""))
        queries = records_to_queries(read_records(cfg, f"pool {origin}"), cfg, Path(origin).name or origin)
    else:
        kinds = ["parquet", "jsonl", "hub", *POOL_KINDS]
        raise DotsError(f"unknown pool kind {kind!r} ({', '.join(kinds[:-1])} or {kinds[-1]})")
    sources = _cfg_get(cfg, "data_sources")
    if sources:
        wanted = set(sources)
        queries = [q for q in queries if q.source in wanted]
    queries = limit_queries(queries, _cfg_get(cfg, "limit"), int(_cfg_get(cfg, "seed", 0)))
    if not queries:
        raise DotsError(
            f"the pool ({kind}: {_cfg_get(cfg, 'path', '')}) holds no query"
            + (f" from data sources {list(sources)}" if sources else "")
        )
    return unique_ids(queries)
