"""docs/method.md §3 selection rules on hand-made consistencies (the scoring itself runs in the search tests)."""

import json

import pytest

from dots.errors import DotsError
from dots.io.problems import Query
from dots.search.selection import (
    SelectionConfig,
    choose,
    load_selection,
    random_selection,
    save_selection,
    score_difficulty,
)


def make(consistencies):
    queries = [Query(f"q{i:02d}", f"question {i}") for i in range(len(consistencies))]
    per_source = {q.id: {"sft": a, "rlvr": b} for q, (a, b) in zip(queries, consistencies)}
    return queries, per_source


def test_filter_median_split_and_balanced_draw():
    # D = 1 - mean(C): q0..q3 easy (D=0..0.3), q4..q7 medium (D=0.5..0.7), q8, q9 too hard (D=1, 0.9)
    cs = [(1, 1), (1, 0.8), (0.8, 0.8), (0.6, 0.8), (0.6, 0.4), (0.4, 0.4), (0.4, 0.2), (0.2, 0.4), (0, 0), (0.2, 0)]
    queries, per = make(cs)
    sel = choose(queries, per, SelectionConfig(n=4, easy_fraction=0.5, seed=1))
    ids = {q.id for q in sel.queries}
    assert not ids & {"q08", "q09"}  # D > 0.8 dropped
    assert sum(sel.pools[i] == "low" for i in ids) == 2 and sum(sel.pools[i] == "medium" for i in ids) == 2
    assert sel.difficulty["q00"] == 0.0 and abs(sel.difficulty["q05"] - 0.6) < 1e-9
    # the threshold is 1 - 1/m: with m = 5, D = 0.8 is kept
    q, p = make([(0.2, 0.2)])
    assert choose(q, p, SelectionConfig(n=1)).queries[0].id == "q00"


def test_strategies_and_short_pool_fill():
    cs = [(1, 1), (1, 0.8), (0.8, 0.8), (0.6, 0.8), (0.6, 0.4), (0.4, 0.4), (0.4, 0.2), (0.2, 0.4)]
    queries, per = make(cs)
    easy = choose(queries, per, SelectionConfig(n=4, strategy="easy"))
    assert all(easy.pools[q.id] == "low" for q in easy.queries)
    medium = choose(queries, per, SelectionConfig(n=4, strategy="medium"))
    assert all(medium.pools[q.id] == "medium" for q in medium.queries)
    short = choose(queries, per, SelectionConfig(n=6, strategy="easy"))  # only 4 low: fill 2 from medium
    assert len(short.queries) == 6 and any("filled" in n for n in short.notes)
    rnd = random_selection(queries, SelectionConfig(n=3, strategy="random", seed=2))
    assert len(rnd.queries) == 3


def test_seed_makes_draw_reproducible():
    cs = [(i / 20, (20 - i) / 40) for i in range(20)]
    queries, per = make(cs)
    a = choose(queries, per, SelectionConfig(n=6, seed=5))
    b = choose(queries, per, SelectionConfig(n=6, seed=5))
    c = choose(queries, per, SelectionConfig(n=6, seed=6))
    assert [q.id for q in a.queries] == [q.id for q in b.queries] != [q.id for q in c.queries]


def test_everything_filtered_says_how_many_and_threshold():
    queries, per = make([(0, 0), (0, 0.2), (0.2, 0)])
    with pytest.raises(DotsError, match=r"all 3 candidates have difficulty D > 0\.800"):
        choose(queries, per, SelectionConfig(n=2))


def test_bad_options():
    with pytest.raises(DotsError, match="strategy"):
        SelectionConfig(strategy="hardest")
    with pytest.raises(DotsError, match="source"):
        SelectionConfig(source="merged")


def test_scoring_resumes_from_record(tmp_path):
    queries = [Query(f"q{i}", f"What is {i}+{i}?") for i in range(5)]
    prompts = {q.id: q.question for q in queries}
    calls = []

    def generate(batch, sampling):
        calls.append(len(batch))
        return [[f"\\boxed{{{i % 2}}}"] * sampling.n for i, _ in enumerate(batch)]

    loaded = []
    activate = {"a": lambda: loaded.append("a"), "b": lambda: loaded.append("b")}
    cfg = SelectionConfig(n=2, m=3, batch=2)
    record = tmp_path / "difficulty.jsonl"
    first = score_difficulty(queries, prompts, activate, generate, cfg, record)
    assert all(first[q.id] == {"a": 1.0, "b": 1.0} for q in queries)
    assert sum(calls) == 10 and loaded == ["a", "b"]
    # drop b's last rows as if killed: only those are recomputed
    rows = record.read_text().splitlines()
    record.write_text("\n".join(rows[:-2]) + "\n" + rows[-2][:10])
    calls.clear(), loaded.clear()
    again = score_difficulty(queries, prompts, activate, generate, cfg, record)
    assert again == first and loaded == ["b"] and sum(calls) == 2


def test_selection_file_roundtrip_and_key(tmp_path):
    queries, per = make([(1, 1), (1, 0.8), (0.8, 0.8), (0.6, 0.8)])
    sel = choose(queries, per, SelectionConfig(n=2))
    save_selection(sel, tmp_path / "selection.jsonl", key="k1")
    back = load_selection(tmp_path / "selection.jsonl", "k1")
    assert [q.id for q in back.queries] == [q.id for q in sel.queries]
    assert load_selection(tmp_path / "selection.jsonl", "k2") is None
    first_row = json.loads((tmp_path / "selection.jsonl").read_text().splitlines()[1])
    assert set(first_row["consistency"]) == {"sft", "rlvr"} and "difficulty" in first_row


def test_an_appended_record_reads_a_cut_line_as_none(tmp_path):
    from dots.io.jsonl import json_lines

    record = tmp_path / "rows.jsonl"
    assert json_lines(record) == []  # no file yet
    record.write_text('{"a": 1}\n{"a": 2, "b"{"a": 3}\n{"a": 4}\n{"a": 5')  # a cut row, a row after it, a cut end
    assert json_lines(record) == [{"a": 1}, None, {"a": 4}, None]
