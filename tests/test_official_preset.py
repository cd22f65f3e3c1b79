"""`preset=official`: the official DoTS code's rules (docs/official.md), each checked against an
implementation written here from its definition, and one lab-sized search through the CLI."""

from __future__ import annotations

import math
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.scoring.grade import consistency_of_labels
from dots.scoring.perplexity import PromptNLL, perplexity
from dots.search.selection import SelectionConfig, choose
from dots.vectors.sparsify import SparseStats, SparsifyConfig, sparsify_source

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bf16_trio(checkpoints):
    """A bf16 base and two bf16 fine-tunes: their differences take few distinct values, so
    many entries tie at any cut."""
    bf16 = {"dtype": torch.bfloat16}
    family = checkpoints(bf16, sft={"seed": 1, **bf16}, rlvr={"seed": 2, **bf16})
    return Checkpoint(family.base), {k: Checkpoint(v) for k, v in family.sources.items()}


def official_cut(tau: np.ndarray, density: float) -> np.ndarray:
    """From the definition: k = int(n·d); nothing kept when k < 1; else every |τ| ≥ the k-th
    largest |τ|."""
    k = int(tau.size * density)
    if k < 1:
        return np.zeros_like(tau)
    threshold = np.sort(np.abs(tau).reshape(-1))[::-1][k - 1]
    return tau * (np.abs(tau) >= threshold)


@pytest.mark.parametrize("density", [0.3, 0.1, 0.7])
def test_ties_cut_equals_the_definition_bit_for_bit(bf16_trio, density):
    base, sources = bf16_trio
    al = align(base, sources)
    cfg = SparsifyConfig(density=density, rescale="none", cut="ties")
    more_than_k = 0
    for key in sources:
        for name, sparse in sparsify_source(al, key, cfg, SparseStats()):
            tau = (sources[key].get(name).float() - base.get(name).float()).numpy()
            want = official_cut(tau, density)
            assert np.array_equal(sparse.numpy().view(np.uint32), want.astype(np.float32).view(np.uint32)), name
            more_than_k += int(np.count_nonzero(want) > int(tau.size * density))
    assert more_than_k > 0, "no tensor had ties at the cut: the test would not tell the cuts apart"


def test_ties_cut_with_a_global_scope_keeps_every_tie(bf16_trio):
    base, sources = bf16_trio
    al = align(base, sources)
    taus = {n: (sources["sft"].get(n).float() - base.get(n).float()).numpy() for n in al.merged}
    flat = np.concatenate([t.reshape(-1) for t in taus.values()])
    want = official_cut(flat, 0.3)
    got = np.concatenate(
        [
            s.numpy().reshape(-1)
            for _, s in sparsify_source(al, "sft", SparsifyConfig(0.3, "global", "none", "ties"), SparseStats())
        ]
    )
    assert np.array_equal(got, want)


def test_global_rescale_is_one_norm_over_the_whole_vector(bf16_trio):
    base, sources = bf16_trio
    al = align(base, sources)
    stats = SparseStats()
    kept = dict(sparsify_source(al, "rlvr", SparsifyConfig(0.3, "tensor", "global", "ties"), stats))
    norm = math.sqrt(
        sum(float(((sources["rlvr"].get(n).float() - base.get(n).float()).double() ** 2).sum()) for n in kept)
    )
    kept_norm = math.sqrt(sum(float((t.double() ** 2).sum()) for t in kept.values()))
    assert stats.gamma("global") == pytest.approx(norm / kept_norm, rel=1e-6)  # γ adds 1e-8 to the denominator


def official_consistency(labels):
    """The official code: Counter.most_common(1) over the answers, 0 when it is 'No_Answer'."""
    answer, hits = Counter("No_Answer" if x is None else x for x in labels).most_common(1)[0]
    return 0.0 if answer == "No_Answer" else hits / len(labels)


def test_official_consistency_equals_the_counter_rule_on_random_draws():
    rng = random.Random(0)
    differs = 0
    for _ in range(2000):
        labels = [rng.choice([None, 0, 1, 2]) for _ in range(rng.randint(1, 8))]
        assert consistency_of_labels(labels, "official") == official_consistency(labels), labels
        differs += consistency_of_labels(labels, "official") != consistency_of_labels(labels)
    assert differs > 0  # the two rules are not the same rule
    assert consistency_of_labels([None, None, 1, 1, 2], "official") == 0.0  # a tie: the first seen wins
    assert consistency_of_labels([1, None, None, 1, 2], "official") == 0.4


def test_perplexity_of_queries_is_the_mean_of_each_prompts_mean():
    nlls = [PromptNLL(2.0, 1), PromptNLL(6.0, 3), PromptNLL(0.0, 0)]
    assert perplexity(nlls, "queries") == pytest.approx(math.exp((2.0 + 2.0) / 2))
    assert perplexity(nlls) == pytest.approx(math.exp(8.0 / 4))


def test_half_split_takes_the_first_half_by_difficulty():
    from dots.io.problems import Query

    queries = [Query(id=f"q{i}", question=str(i), answer=None) for i in range(9)]
    # D = 1 − mean C: four queries tie at D = 0.5 across what would be the median
    c = [1.0, 0.9, 0.5, 0.5, 0.5, 0.5, 0.2, 0.2, 0.3]
    per_source = {q.id: {"a": ci, "b": ci} for q, ci in zip(queries, c)}
    half = choose(
        queries, per_source, SelectionConfig(n=4, threshold=1.0, split="half", easy_fraction=1.0, strategy="easy")
    )
    assert half.pools == {q: "low" for q in half.pools} and set(half.pools) <= {"q0", "q1", "q2", "q3"}
    median = choose(queries, per_source, SelectionConfig(n=9, threshold=1.0, split="median"))
    assert sum(p == "low" for p in median.pools.values()) == 6  # D ≤ median 0.5: q0..q5


def test_default_options_keep_the_keys_runs_and_caches_had():
    assert SparsifyConfig().key() == {"density": 0.3, "scope": "tensor", "rescale": "global"}
    assert SparsifyConfig(cut="ties").key()["cut"] == "ties"
    from helpers import compose

    from dots.search.identity import run_identity

    class Fingerprinted:
        def fingerprint(self):
            return "x"

    default = run_identity(compose([]), Fingerprinted(), {"sft": Fingerprinted()})
    assert "cut" not in default["sparsify"] and "split" not in default["selection"]
    assert "consistency" not in default["search"] and "perplexity" not in default["search"]
    assert "seeds" not in default["search"]  # search.seeds came later: per_trial keeps old runs' keys
    common = run_identity(compose(["search.seeds=common"]), Fingerprinted(), {"sft": Fingerprinted()})
    assert common["search"]["seeds"] == "common"
    official = run_identity(compose(["preset=official"]), Fingerprinted(), {"sft": Fingerprinted()})
    assert official["sparsify"]["cut"] == "ties" and official["search"]["consistency"] == "official"


def test_the_preset_resolves_to_the_official_rules():
    from helpers import compose

    cfg = compose(["preset=official"])
    assert (cfg.sparsify.cut, cfg.sparsify.rescale, cfg.sparsify.density) == ("ties", "none", 0.3)
    assert (cfg.sampler.name, cfg.sampler.population_size) == ("nsga2", 50)
    assert list(cfg.search.range) == [0.5, 2.0] and cfg.search.k == 7 and cfg.search.n_trials == 100
    assert (cfg.selection.n, cfg.selection.m, cfg.selection.threshold) == (16, 5, 0.8)
    assert (cfg.selection.source, cfg.selection.split) == ("sparsified", "half")
    assert (cfg.search.consistency, cfg.search.perplexity) == ("official", "queries")
    # every trial, every vote: dots' defaults stop a converged study and draw the votes in rounds
    assert cfg.search.stop.rule == "none" and cfg.search.adaptive.enabled is False
    assert cfg.pick == "max_consistency" and cfg.confirm.enabled is False  # dots: smoothed, confirmed
    defaults = compose([])
    assert defaults.search.stop.rule == "hypervolume" and defaults.search.adaptive.enabled is True
    assert compose(["preset=official", "sampler=tpe", "search.k=3"]).sampler.name == "tpe"  # the command line wins


@pytest.mark.slow
def test_a_search_with_the_preset_through_the_cli(tiny, tmp_path):
    import subprocess

    from helpers import overrides

    _, base, srcs, pool = tiny  # its sft and rlvr, its pool
    root = tmp_path
    run_dir = root / "run"
    ovr = overrides((root, base, srcs, pool), run_dir, trials=4)
    ovr += ["preset=official", "selection.threshold=1.0", "selection.n=4", "search.k=2", "search.n_trials=4"]
    done = subprocess.run([sys.executable, "-m", "dots.search", *ovr], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    import csv

    rows = list(csv.DictReader((run_dir / "trials.csv").open()))
    assert len(rows) == 4
    lams = [float(r[c]) for r in rows for c in ("lambda_sft", "lambda_rlvr")]
    assert all(0.5 <= x <= 2.0 for x in lams), lams
