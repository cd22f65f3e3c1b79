"""Pool loaders on the real verl parquet and on jsonl."""

import json
from pathlib import Path

import pytest

from dots.errors import DotsError
from dots.io.problems import load_pool
from dots.paths import DATA_DIR

SHARED = DATA_DIR / "math" / "valid.all.dedup.parquet"  # the real verl parquet, shipped with dots


def test_verl_parquet_pool():
    queries = load_pool({"kind": "parquet", "path": str(SHARED)})
    assert len(queries) == 1590
    assert len({q.id for q in queries}) == 1590
    by_source = {}
    for q in queries:
        by_source[q.source] = by_source.get(q.source, 0) + 1
    assert by_source == {"olympiad_bench": 675, "math": 500, "minerva": 272, "amc": 83, "aime": 30, "aime25": 30}
    first = [q for q in queries if q.source == "math"][0]
    assert first.question.startswith("Convert the point $(0,3)$")
    assert "systematic, thorough reasoning" not in first.question  # the system prompt is dropped
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_parquet_filter_and_seeded_limit():
    cfg = {"kind": "parquet", "path": str(SHARED), "data_sources": ["aime", "amc"], "limit": 20, "seed": 3}
    a, b = load_pool(cfg), load_pool(cfg)
    assert [q.id for q in a] == [q.id for q in b] and len(a) == 20
    assert {q.source for q in a} <= {"aime", "amc"}
    assert [q.id for q in load_pool({**cfg, "seed": 4})] != [q.id for q in a]
    with pytest.raises(DotsError, match="no query"):
        load_pool({**cfg, "data_sources": ["gsm8k"]})


def test_jsonl_pool_and_errors(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"What is {i}+1?", "answer": str(i + 1)}) for i in range(5)))
    queries = load_pool({"kind": "jsonl", "path": str(f), "question_key": "question", "answer_key": "answer"})
    assert [q.answer for q in queries] == ["1", "2", "3", "4", "5"]
    with pytest.raises(DotsError, match="does not exist"):
        load_pool({"kind": "jsonl", "path": str(tmp_path / "missing.jsonl")})
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DotsError, match="no query"):
        load_pool({"kind": "jsonl", "path": str(tmp_path / "empty.jsonl")})
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    with pytest.raises(DotsError, match="not JSON"):
        load_pool({"kind": "jsonl", "path": str(tmp_path / "bad.jsonl")})


def test_math_valid_pool_resolves_to_the_packaged_parquet():
    """backbone=qwen7b's pool (math_valid) is the parquet inside the package, from any directory."""
    from dots.options.compose import compose

    cfg = compose("search", ["backbone=qwen7b"])
    assert Path(cfg.pool.path) == SHARED and SHARED.is_file()
    queries = load_pool(cfg.pool)
    assert len(queries) == int(cfg.pool.limit) == 512
    ids = [q.id for q in queries]
    order = {q.id: i for i, q in enumerate(load_pool({"kind": "parquet", "path": str(SHARED)}))}
    assert [order[i] for i in ids] == sorted(order[i] for i in ids)  # the seeded sample keeps file order
