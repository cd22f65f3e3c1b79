"""Every gold of the packaged verl math parquet (1590 problems), written the ways models
write it, is graded correct; the same gold with another number is graded wrong.

Renderings: tests/gold_renderings.py (boxed, `<answer>` tags, "The answer is $…$",
LaTeX scientific notation for e-notation golds, `\\%` and both numeric readings for
percentages, exact fraction/decimal forms, and OlympiadBench's multi-answer golds of several
`$…$` spans in each wrapper, whole). Goals of the grading issue: >= 99.5% per
benchmark and overall, 100% for scientific notation, percentages and multi-span answers.
"""

from collections import defaultdict

import pytest
from gold_renderings import load_golds, renderings

from dots.scoring import is_correct

SCI_PCT = ("sci_times", "sci_cdot", "sci_plain", "pct_latex", "pct_number", "pct_fraction")
SPANS = ("spans_tag", "spans_boxed", "spans_answer_is", "spans_perturbed")


@pytest.fixture(scope="module")
def graded():
    rows = renderings()
    return [(r, is_correct(r.completion, r.gold)) for r in rows]


def _failures(graded, keep):
    bad = [r for r, ok in graded if keep(r) and ok != r.expect]
    return [(r.source, r.kind, r.gold, r.completion.rsplit("\n", 1)[-1]) for r in bad]


def test_every_row_is_rendered(graded):
    golds = load_golds()
    assert len(golds) == 1590
    assert {r.index for r, _ in graded} == set(range(1590))
    kinds = {r.kind for r, _ in graded}
    assert {"boxed", "answer_tag", "answer_is", "exact_alt", "perturbed", *SCI_PCT, *SPANS} <= kinds
    assert sum(r.kind == "sci_times" for r, _ in graded) == 58  # 58 e-notation golds, all Minerva
    assert sum(r.kind == "pct_latex" for r, _ in graded) == 3  # 62.5%, 17.5%, $8 \%$
    assert sum(r.kind == "spans_tag" for r, _ in graded) == 19  # `$69$,$84$`, … all OlympiadBench
    assert sum(r.kind == "spans_boxed" for r, _ in graded) == 18  # the one with prose between its spans: tag only


def test_scientific_notation_and_percentages_all_correct(graded):
    assert _failures(graded, lambda r: r.kind in SCI_PCT) == []


def test_multi_span_answers_are_read_whole(graded):
    """`<answer>$69$,$84$</answer>`, `$\\boxed{69}$,$\\boxed{84}$`, "The answer is $69$,$84$."
    are right; the same with its first number changed is wrong."""
    assert _failures(graded, lambda r: r.kind in SPANS) == []


@pytest.mark.parametrize("source", ["aime", "aime25", "amc", "math", "minerva", "olympiad_bench"])
def test_share_per_benchmark(graded, source):
    mine = [(r, ok) for r, ok in graded if r.source == source]
    right = [ok for r, ok in mine if r.expect]
    wrong = [not ok for r, ok in mine if not r.expect]
    assert sum(right) / len(right) >= 0.995, _failures(mine, lambda r: r.expect)
    assert sum(wrong) / len(wrong) >= 0.995, _failures(mine, lambda r: not r.expect)


def test_overall_share(graded):
    by_kind = defaultdict(list)
    for r, ok in graded:
        by_kind[r.kind].append(ok == r.expect)
    overall = [ok == r.expect for r, ok in graded]
    assert sum(overall) / len(overall) >= 0.995, {k: sum(v) / len(v) for k, v in by_kind.items()}
