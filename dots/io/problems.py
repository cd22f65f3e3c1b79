"""Problems and queries: the one loader of pools (search) and benchmarks (evaluation).

Sources: a verl/LUFFY parquet, jsonl, a Hub dataset, and pool kinds registered in `POOL_KINDS` by
what makes their records: the lab registers `lab` when `dots.lab` is imported, which `POOL_KINDS`
does itself the first time it is asked for a kind it lacks (its provider), so no caller has to.

A pool is a list of `Query` (question text, and the gold answer when the file has one:
DoTS never uses it for the search, but SAR's Fisher and the evaluation do).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dots.checks import positive_int
from dots.errors import DotsError, first_line
from dots.registry import Registry

__all__ = ["POOL_KINDS", "Query", "limit_queries", "load_pool", "read_records", "records_to_queries", "unique_ids"]


@dataclass(frozen=True)
class Query:
    id: str
    question: str
    answer: str | None = None
    source: str = ""


# every pool kind: kind → the queries of a pool config (before its data_sources and limit)
POOL_KINDS: Registry[Callable[[Any], list[Query]]] = Registry("pool kind", providers=("dots.lab",))


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
    because dots applies its own template. None when there is no such text."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, (list, tuple)):
        return None
    users = [m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def json_type(value: Any) -> str:
    """JSON's name for the type of a parsed value (null, true/false, number, text, array, object)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    names = {int: "a number", float: "a number", str: "a text", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


class Records(list):
    """Raw records of a file, each named in errors by `where(i)` (`path:line` of a JSONL line,
    `path: row i` of a parquet row)."""

    def __init__(self, rows: Sequence[dict], where: Callable[[int], str]):
        super().__init__(rows)
        self.where = where


def _text_key(cfg: Any, key: str, default: str, origin: str, section: str) -> str:
    value = _cfg_get(cfg, key, default)
    if not isinstance(value, str) or not value:
        raise DotsError(f"{origin}: {section}.{key} must be a column name (text), got {value!r}")
    return value


def records_to_queries(records: Sequence[Mapping], cfg: Any, origin: str, section: str = "pool") -> list[Query]:
    """Queries of raw records: the question under `question_key` (text, or verl's chat
    messages), the gold under `answer_key`; a record without a question names itself. `section`:
    where the keys are configured, as an error names them (`pool.question_key`)."""
    q_key = _text_key(cfg, "question_key", "prompt", origin, section)
    a_key = _text_key(cfg, "answer_key", "reward_model.ground_truth", origin, section)
    s_key = _text_key(cfg, "source_key", "data_source", origin, section)
    where = getattr(records, "where", lambda i: f"{origin}: record {i}")
    out = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise DotsError(f"{where(i)}: a record must be a JSON object, got {json_type(rec)}")
        question = question_from_messages(_dig(rec, q_key))
        if not question or not question.strip():
            raise DotsError(f"{where(i)}: no question text under {q_key!r}")
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
            first = first_line(exc)
            raise DotsError(f"{origin}: cannot load Hub dataset {name!r}: {first}") from None
        return [dict(r) for r in ds]
    path = Path(str(_cfg_get(spec, "path", ""))).expanduser()
    if not path.is_file():
        problem = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise DotsError(f"{origin}: {path} {problem}")
    if kind == "parquet":
        return _parquet_records(path)
    if kind != "jsonl":
        raise DotsError(f"{origin}: unknown kind {kind!r} (parquet, jsonl or hub)")
    return _jsonl_records(path)


def _parquet_records(path: Path) -> Records:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise DotsError(f"{path}: not a readable parquet file ({first_line(exc)})") from None
    return Records(rows, lambda i: f"{path}: row {i}")


def _jsonl_records(path: Path) -> Records:
    """One JSON object per line (blank lines skipped), read as UTF-8."""
    rows, lines = [], []
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DotsError(f"{path}:{line_no}: not UTF-8 text (byte {exc.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DotsError(f"{path}:{line_no}: not JSON ({exc.msg})") from None
            except (ValueError, RecursionError) as exc:  # a number too long, arrays nested too deep
                raise DotsError(f"{path}:{line_no}: not readable JSON ({type(exc).__name__})") from None
            if not isinstance(record, dict):
                raise DotsError(f"{path}:{line_no}: a record must be a JSON object, got {json_type(record)}")
            rows.append(record)
            lines.append(line_no)
    return Records(rows, lambda i: f"{path}:{lines[i]}")


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


@POOL_KINDS.register("parquet")
@POOL_KINDS.register("jsonl")
@POOL_KINDS.register("hub")
def file_pool(cfg: Any) -> list[Query]:
    """The queries of a parquet or jsonl file or a Hub dataset (`path`, the keys of its columns)."""
    origin = str(_cfg_get(cfg, "path", ""))
    return records_to_queries(read_records(cfg, f"pool {origin}"), cfg, Path(origin).name or origin)


def load_pool(cfg: Any) -> list[Query]:
    """Queries of a pool config: kind (parquet|jsonl|hub|a registered kind: lab), path, filters, limit, seed."""
    kind = _cfg_get(cfg, "kind", "parquet")
    queries = POOL_KINDS.lookup(kind)(cfg)
    sources = _cfg_get(cfg, "data_sources")
    if sources:
        if isinstance(sources, str) or not all(isinstance(s, (str, int)) for s in sources):
            raise DotsError(f"pool.data_sources must be a list of names, got {sources!r}")
        wanted = {str(s) for s in sources}
        queries = [q for q in queries if q.source in wanted]
    limit = _cfg_get(cfg, "limit")
    limit = None if limit is None else positive_int(limit, "pool.limit")
    queries = limit_queries(queries, limit, positive_int(_cfg_get(cfg, "seed", 0), "pool.seed", minimum=0))
    if not queries:
        raise DotsError(
            f"the pool ({kind}: {_cfg_get(cfg, 'path', '')}) holds no query"
            + (f" from data sources {list(sources)}" if sources else "")
        )
    return unique_ids(queries)
