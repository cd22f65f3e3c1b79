"""The pick rules (dots.search.pick.rules), the smoothed C (smoothing) and the confirmation's
bookkeeping (confirm): each assertion follows from docs/method.md §5."""

from __future__ import annotations

import json
import math

import pytest
from helpers import lab_scorer

from dots.errors import DotsError
from dots.search.pick.confirm import (
    CONFIRM_SEED,
    PARTIAL,
    confirm_candidates,
    confirmed_choice,
    held_out,
    interval_of,
)
from dots.search.pick.pareto import Point, pareto_front, pick
from dots.search.pick.rules import PickContext, agreement_of, rank, uncertainty
from dots.search.pick.smoothing import BANDWIDTHS, estimate, fit_smoother


def point(n, c, ppl, sft, rlvr=1.0, answers=None, per_query=None):
    return Point(n, c, ppl, {"sft": sft, "rlvr": rlvr}, answers, per_query)


def test_the_kernel_estimate_is_the_weighted_mean_of_its_neighbours_and_the_prior():
    # two trials at scaled distance 0.5, h = 0.25: the other's weight is exp(-0.25 / 0.125) = e^-2;
    # the prior C̄ = 0.7 weighs one trial (κ = 1)
    w = math.exp(-2.0)
    value, se = estimate([(0.0,), (0.5,)], [0.9, 0.5], (0.0,), 0.25, sigma=0.1, prior=0.7)
    assert value == pytest.approx((0.9 + w * 0.5 + 0.7) / (1 + w + 1))
    assert se == pytest.approx(0.1 * math.sqrt(1 + w * w) / (1 + w + 1))


def test_a_constant_is_smoothed_to_itself_and_the_bandwidth_is_a_candidate():
    lams = [[0.5 + 0.1 * i, 1.0] for i in range(10)]
    s = fit_smoother(lams, [0.8] * 10, 0.5, 2.0)
    assert s.bandwidth in BANDWIDTHS
    assert s.at([1.1, 1.0])[0] == pytest.approx(0.8)
    assert s.sigma == pytest.approx(0.0, abs=1e-12)


def test_the_bandwidth_follows_the_data():
    """Noise around a constant → a wide kernel; a sharp step sampled densely → a narrow one."""
    xs = [0.5 + 1.5 * i / 39 for i in range(40)]
    noisy = [0.8 + (0.02 if i % 2 else -0.02) for i in range(40)]
    step = [0.9 if x < 1.25 else 0.3 for x in xs]
    wide = fit_smoother([[x] for x in xs], noisy, 0.5, 2.0).bandwidth
    narrow = fit_smoother([[x] for x in xs], step, 0.5, 2.0).bandwidth
    assert wide > narrow


def test_smoothed_prefers_a_good_region_to_a_lucky_trial():
    """One trial far from the rest scored 0.95 (lucky); a cluster of eight near λ_sft = 0.6 scores
    0.90–0.93. Max consistency takes the lone trial, the smoothed rule the cluster's best."""
    cluster = [point(i, 0.90 + 0.004 * i, 7.0, 0.55 + 0.02 * i) for i in range(8)]
    lucky = point(8, 0.95, 7.0, 1.9, 1.9)
    poor = [point(9 + i, 0.6, 9.0, 1.5 + 0.1 * i, 1.8) for i in range(3)]
    points = [*cluster, lucky, *poor]
    assert rank("max_consistency", points)[0].number == 8
    chosen = rank("smoothed", points, PickContext(bounds=(0.5, 2.0)))[0]
    assert chosen.number in range(8)
    sure = uncertainty(chosen, "smoothed", points, PickContext(bounds=(0.5, 2.0)))
    lo, hi = sure["smoothed"]["interval"]
    assert lo <= sure["smoothed"]["consistency"] <= hi


def test_max_consistency_ranks_every_trial_and_its_first_is_the_fronts_pick():
    points = [point(0, 0.9, 8.0, 1.0), point(1, 0.9, 7.0, 1.1), point(2, 0.89, 9.0, 1.2), point(3, 0.7, 5.0, 1.3)]
    ranked = rank("max_consistency", points)
    assert [p.number for p in ranked] == [1, 0, 2, 3]  # trial 0 and 2 are off the front, still ranked
    assert ranked[0] == pick(pareto_front(points), "max_consistency")
    assert rank("knee", points)[0] == pick(pareto_front(points), "knee")


def test_agreement_ranks_the_front_by_agreement_with_the_sources():
    ids = ["a", "b", "c", "d"]
    sources = {"sft": {"a": "1", "b": "2", "c": "3", "d": "4"}, "rlvr": {"a": "1", "b": "2", "c": "9", "d": "4"}}
    context = PickContext(ids, sources)
    sides = point(0, 0.90, 6.0, 0.6, answers=("1", "2", "3", "4"))  # sft everywhere: 4/4 and 3/4
    neither = point(1, 0.95, 6.5, 0.7, answers=("7", "7", "7", "7"))  # higher C, agrees with nobody
    assert agreement_of(sides, context) == pytest.approx((1.0 + 0.75) / 2)
    assert agreement_of(neither, context) == 0.0
    assert rank("agreement", [sides, neither], context)[0].number == 0
    assert rank("max_consistency", [sides, neither], context)[0].number == 1
    with pytest.raises(DotsError, match="sources' answers"):
        rank("agreement", [sides, neither], PickContext(ids, {}))


def test_an_unknown_rule_and_no_trial_are_one_line_errors():
    with pytest.raises(DotsError, match="unknown pick rule 'best'.*max_consistency"):
        rank("best", [point(0, 0.5, 5.0, 1.0)])
    with pytest.raises(DotsError, match="no complete trial"):
        rank("max_consistency", [])


def test_the_interval_is_mean_plus_minus_1_96_standard_errors():
    lo, hi = interval_of([0.0, 1.0])  # mean 0.5, sd √0.5, n 2 → half-width 1.96·√0.5/√2 = 0.98
    assert (lo, hi) == pytest.approx((0.5 - 0.98, 0.5 + 0.98))
    assert interval_of([0.7]) == [0.7, 0.7]


def test_held_out_queries_are_outside_the_selection_and_seeded():
    ids = [f"q{i}" for i in range(20)]
    chosen = held_out(ids, ids[:5], 6, seed=3)
    assert len(chosen) == 6 and not set(chosen) & set(ids[:5])
    assert chosen == held_out(list(reversed(ids)), ids[:5], 6, seed=3)  # the pool's order does not matter
    assert chosen != held_out(ids, ids[:5], 6, seed=4)
    assert held_out(ids, ids[:18], 6, seed=3) == ids[18:]  # fewer remain: all of them


def test_the_confirmed_pick_is_the_highest_fresh_consistency_ties_by_rank():
    rows = [{"trial": 4, "rank": 0, "consistency": 0.8}, {"trial": 9, "rank": 1, "consistency": 0.85}]
    assert confirmed_choice(rows)["trial"] == 9
    rows[1]["consistency"] = 0.8
    assert confirmed_choice(rows)["trial"] == 4


def test_confirmation_draws_fresh_samples_and_resumes_after_a_kill(tmp_path):
    """On the lab's real scorer: a candidate's confirmation samples with a seed no trial uses, so
    its C is a new estimate; a confirmation stopped after its first candidate scores only the rest."""
    scorer = lab_scorer(tmp_path / "cache", k=4, queries=8)
    try:
        seen = []

        def score(lam, seed):
            seen.append(seed)
            return scorer(lam, seed)

        trials = [scorer({"sft": 0.6, "rlvr": 1.0}, seed=s) for s in (0, 1)]
        candidates = [
            point(0, trials[0].consistency, trials[0].perplexity, 0.6, per_query=tuple(trials[0].per_query)),
            point(1, trials[1].consistency, trials[1].perplexity, 0.6, per_query=tuple(trials[1].per_query)),
        ]
        rows = confirm_candidates(score, candidates[:1], 0, tmp_path, "key-1")  # "killed" after one
        assert seen == [CONFIRM_SEED]
        again = confirm_candidates(score, candidates, 0, tmp_path, "key-1")
        assert seen == [CONFIRM_SEED, CONFIRM_SEED + 1] and again[0] == rows[0]
        fresh = scorer({"sft": 0.6, "rlvr": 1.0}, seed=CONFIRM_SEED)
        assert again[0]["consistency"] == fresh.consistency  # the fresh draw, not the trial's estimate
        assert again[0]["perplexity"] == pytest.approx(trials[0].perplexity)  # PPL has no sampling noise
        assert again[0]["tokens"] > 0 and again[0]["samples"] == 8 * 4
        other = confirm_candidates(score, candidates, 0, tmp_path, "key-2")  # other options: scored again
        assert len(seen) == 4 and len(other) == 2
        lines = [json.loads(x) for x in (tmp_path / PARTIAL).read_text().splitlines()]
        assert [(x["key"], x["rank"]) for x in lines] == [("key-1", 0), ("key-1", 1), ("key-2", 0), ("key-2", 1)]
    finally:
        scorer.engine.close()
