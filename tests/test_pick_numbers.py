"""The pick, its confirmation, the stop rule and the input checks on numbers worked out by hand (#49):
candidates that differ in C and PPL by known amounts, ties in each objective, a history whose
windows gain known shares of the hypervolume, and each check of dots/io/inputs.py refusing its
own case — so a rule that picks the wrong candidate, judges a window early or lets one
contradiction through fails here, where the tiny checkpoints' C of 0 everywhere could not tell."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from helpers import study_of
from safetensors.torch import save_file

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.inputs import check_checkpoint, check_config_against_weights
from dots.search.pick.confirm import confirm_candidates, confirmed_choice
from dots.search.pick.pareto import Point, by_knee, pareto_front, pick
from dots.search.pick.rules import PickContext, agreement_of, rank
from dots.search.study.stopping import StopRule, hypervolume, normalised, relative_gain, stop_reason


def point(n: int, c: float, ppl: float, sft: float = 1.0) -> Point:
    return Point(n, c, ppl, {"sft": sft, "rlvr": 1.0})


# ---- the front and the front-only rules: ties in each objective


def test_a_perplexity_tie_on_the_front_keeps_only_the_higher_consistency():
    """(0.7, 5) is dominated by (0.9, 5): equal PPL, higher C. (0.95, 6) stays: higher C."""
    front = pareto_front([point(0, 0.9, 5.0), point(1, 0.7, 5.0), point(2, 0.95, 6.0)])
    assert [p.number for p in front] == [2, 0]


def test_a_consistency_tie_keeps_only_the_lower_perplexity_and_exact_twins_both():
    front = pareto_front([point(0, 0.8, 4.0), point(1, 0.8, 3.0), point(2, 0.8, 3.0), point(3, 0.5, 1.0)])
    assert [p.number for p in front] == [1, 2, 3]
    assert pick(front, "max_consistency").number == 1  # twins: the earlier trial


def test_the_knee_on_hand_computed_distances():
    """Front (C, PPL): (1.0, 10), (0.8, 4), (0.5, 2), (0.0, 1). Scaled over the front: C by 1,
    PPL by 9. Distances to (1, 1): 1.0; √(0.2² + (3/9)²) = 0.389; √(0.5² + (1/9)²) = 0.512; 1.0."""
    points = [point(0, 1.0, 10.0), point(1, 0.8, 4.0), point(2, 0.5, 2.0), point(3, 0.0, 1.0)]
    assert [p.number for p in rank("knee", points)] == [1, 2, 0, 3]  # 0 and 3 tie at 1.0: higher C first


def test_the_knee_scales_each_objective_by_its_own_span_over_the_front():
    """C spans 0.1, PPL 10: (0.9, 20) → (0, 1): 1; (0.85, 10) → (0.5, 0): 0.5; (0.8, 12) →
    (1, 0.2): 1.02. Divided by the wrong span (or multiplied) the order changes."""
    points = [point(0, 0.9, 20.0), point(1, 0.85, 10.0), point(2, 0.8, 12.0)]
    assert [p.number for p in by_knee(points)] == [1, 0, 2]
    same_c = [point(0, 0.5, 3.0), point(1, 0.5, 2.0)]  # one objective without a span: the other decides
    assert [p.number for p in by_knee(same_c)] == [1, 0]
    assert [p.number for p in by_knee([point(0, 0.4, 2.0), point(1, 0.6, 2.0)])] == [1, 0]


def test_agreement_counts_equivalent_answers_and_nothing_without_comparable_answers():
    ids = ["a", "b"]
    sources = {"sft": {"a": "0.5", "b": "2"}}
    halves = Point(0, 0.9, 3.0, {"sft": 1.0}, ("1/2", "2"))
    assert agreement_of(halves, PickContext(ids, sources)) == 1.0  # math: 1/2 is 0.5
    assert agreement_of(halves, PickContext(ids, sources, mode="choice")) == 0.5  # letters: equal strings
    short = Point(1, 0.9, 3.0, {"sft": 1.0}, ("0.5",))  # one answer for two queries
    assert agreement_of(short, PickContext(ids, sources)) == 0.0
    assert agreement_of(halves, PickContext(ids, {"sft": {"c": "1"}})) == 0.0  # no query in common


# ---- the confirmation: a scripted scorer whose fresh draws differ from the search's


def test_the_pick_is_the_highest_confirmed_c_with_its_interval_not_the_best_search_c(tmp_path):
    """The search ranks trial 7 first (C 0.90, a lucky draw); its fresh C is 0.70, trial 3's is
    0.85 (per query 1, 1, 0.7, 0.7: mean 0.85, sd √0.03, half-width 1.96·√0.03/2 = 0.16974)."""
    points = [point(7, 0.90, 3.0, 0.6), point(3, 0.88, 2.5, 0.8), point(5, 0.60, 2.0, 1.2)]
    fresh = {0.6: [0.7, 0.7, 0.7, 0.7], 0.8: [1.0, 1.0, 0.7, 0.7], 1.2: [0.9, 0.9, 0.9, 0.9]}
    seeds = []

    def score(coefficients, seed):
        seeds.append(seed)
        per_query = fresh[coefficients["sft"]]
        return SimpleNamespace(
            consistency=sum(per_query) / 4, per_query=per_query, perplexity=3.0, tokens=10, samples=4
        )

    candidates = rank("max_consistency", points)[:2]
    assert [p.number for p in candidates] == [7, 3]
    rows = confirm_candidates(score, candidates, 0, tmp_path, "k")
    chosen = confirmed_choice(rows)
    assert chosen["trial"] == 3 and chosen["consistency"] == pytest.approx(0.85)
    assert chosen["interval"] == pytest.approx([0.85 - 0.16974, 0.85 + 0.16974], abs=1e-5)
    assert rows[0]["interval"] == pytest.approx([0.7, 0.7])  # no spread, no width
    assert chosen["search"] == {"consistency": 0.88, "perplexity": 2.5} and len(set(seeds)) == 2


# ---- the stop rule: windows and the share of the hypervolume


def test_the_hypervolume_of_a_staircase_worked_out_by_hand():
    """(0.2, 0.8), (0.5, 0.3), (0.9, 0.1) under (1, 1): 0.3·0.2 + 0.4·0.7 + 0.1·0.9 = 0.43."""
    assert hypervolume([(0.9, 0.1), (0.2, 0.8), (0.5, 0.3)], (1.0, 1.0)) == pytest.approx(0.43)
    # a tie in y: the second point adds nothing, and does not cut the first one's step short
    assert hypervolume([(0.2, 0.5), (0.6, 0.5)], (1.0, 1.0)) == pytest.approx(0.4)
    # the reference's axes are not interchangeable; points beyond it on either axis add nothing
    assert hypervolume([(0.5, 0.5)], (1.0, 2.0)) == pytest.approx(0.75)
    assert hypervolume([(0.5, 1.5), (1.5, 0.5)], (1.0, 2.0)) == pytest.approx(0.5 * 0.5)
    assert hypervolume([(0.5, 1.5)], (1.0, 1.0)) == 0.0


def test_the_objectives_are_min_max_normalised_on_one_minus_c_and_log_ppl():
    """(C, PPL) = (0.5, e), (0.9, e³), (0.7, e²) → (1 − C, ln PPL) = (0.5, 1), (0.1, 3), (0.3, 2):
    spans 0.4 and 2 from 0.1 and 1 → (1, 0), (0, 1), (0.5, 0.5)."""
    out = normalised([(0.5, math.e), (0.9, math.e**3), (0.7, math.e**2)])
    assert out == [pytest.approx(v) for v in [(1.0, 0.0), (0.0, 1.0), (0.5, 0.5)]]
    assert normalised([(0.5, math.e), (0.5, math.e**2)]) == [(0.0, 0.0), (0.0, 1.0)]  # no C span: 0
    assert [c for c, _ in normalised([(0.5, 0.0), (0.6, 1.0)])] == [1.0, 0.0]  # a PPL of 0: no error
    assert relative_gain([None, None], 1) == 0.0  # nothing scored: nothing gained
    # a pruned trial in the earlier part: the share as without it (two points, 0.10 / 0.21)
    assert relative_gain([None, (0.0, 1.0), (1.0, math.e)], 1) == pytest.approx(0.10 / 0.21)


def test_the_share_a_window_adds_is_the_hand_computed_one():
    """(C, PPL) = (0, 1) then (1, e): normalised (1 − C, log PPL) = (1, 0) and (0, 1); with the
    reference at 1.1 the front's area is 0.1·1 + 0.1·1.1 = 0.21, the first point's alone 0.11:
    the last window of 1 added 0.10 / 0.21."""
    assert relative_gain([(0.0, 1.0), (1.0, math.e)], 1) == pytest.approx(0.10 / 0.21)
    assert relative_gain([(0.0, 1.0), None, (1.0, math.e)], 2) == pytest.approx(0.10 / 0.21)  # pruned: no point
    assert relative_gain([(1.0, math.e), (0.0, 1.0), (0.0, 2.0)], 1) == 0.0  # dominated by (0, 1)


def test_the_stop_rule_judges_only_after_two_whole_windows():
    """Two points on the front, then three that add nothing: with a window of 3 the last window
    gained 0, but five trials are fewer than two windows, so no verdict; the sixth gives one."""
    rule = StopRule("hypervolume", window=3, threshold=0.01)
    history = [(0.5, 2.0), (0.9, 3.0)] + [(0.1, 9.0)] * 3
    assert relative_gain(history, 3) == 0.0
    assert stop_reason(study_of(history), rule) is None
    reason = stop_reason(study_of(history + [(0.1, 9.0)]), rule)
    assert reason and "after 6 scored trials: the last 3 added 0.00%" in reason


def test_a_window_that_gains_more_than_the_threshold_goes_on():
    rule = StopRule("hypervolume", window=1, threshold=0.47)  # the last trial adds 10/21 = 0.476
    assert stop_reason(study_of([(0.0, 1.0), (1.0, math.e)]), rule) is None
    assert stop_reason(study_of([(0.0, 1.0), (1.0, math.e)]), StopRule("hypervolume", 1, 0.48))


# ---- dots/io/inputs.py: each check refuses its own case


def checkpoint(tmp_path, config: dict, tensors: dict[str, list[int]], name: str = "m") -> Checkpoint:
    root = tmp_path / name
    root.mkdir()
    save_file({k: torch.zeros(shape) for k, shape in tensors.items()}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config))
    return Checkpoint(root)


QWEN = {"model_type": "qwen2", "hidden_size": 8, "vocab_size": 100, "num_hidden_layers": 2}
WEIGHTS = {
    "model.embed_tokens.weight": [100, 8],
    **{
        f"model.layers.{i}.self_attn.q_proj.{p}": ([8, 8] if p == "weight" else [8])
        for i in (0, 1)
        for p in ("weight", "bias")
    },
}


def test_a_config_that_matches_its_weights_passes(tmp_path):
    check_config_against_weights(checkpoint(tmp_path, QWEN, WEIGHTS))


@pytest.mark.parametrize(
    ("change", "drop", "message"),
    [
        (
            {"vocab_size": 164},
            None,
            r"vocab_size is 164 but the weights' model.embed_tokens.weight has shape \[100, 8\]",
        ),
        ({"hidden_size": 16}, None, r"hidden_size is 16 but .* \[100, 8\]"),
        ({"num_hidden_layers": 3}, None, "num_hidden_layers is 3 but the weights hold 2 layers"),
        ({"model_type": "llama"}, None, "a llama config without attention biases, but the weights hold"),
        ({}, "bias", "a qwen2 config with attention biases, but the weights hold no q_proj.bias"),
        ({"model_type": "llama", "attention_bias": True}, "bias", "a llama config with attention biases"),
    ],
)
def test_each_contradiction_of_config_and_weights_is_refused(tmp_path, change, drop, message):
    tensors = {k: v for k, v in WEIGHTS.items() if not (drop and k.endswith(drop))}
    with pytest.raises(DotsError, match=message):
        check_config_against_weights(checkpoint(tmp_path, {**QWEN, **change}, tensors))


def test_a_tokenizer_with_more_ids_than_embedding_rows_is_refused(tmp_path):
    """The tokenizer is checked against the embedding's 100 rows, not the config's word for it."""
    from tokenizers import Tokenizer, models

    ckpt = checkpoint(tmp_path, QWEN, WEIGHTS)
    vocab = {f"t{i}": i for i in range(101)}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(ckpt.path / "tokenizer.json"))
    with pytest.raises(DotsError, match="has 101 tokens but .* has vocab_size 100"):
        check_checkpoint(ckpt)
    (ckpt.path / "tokenizer.json").write_text('{"model": 1}')
    with pytest.raises(DotsError, match="does not load as a tokenizer"):
        check_checkpoint(ckpt)
