"""search.seeds (dots.search.study.scorer.trial_seed): common random numbers against one stream per
trial, end to end: a small lab search (`backbone=lab`, transformers engine). Two trials whose merges differ by
1e-4 in one λ are the same model to the sampler, so under `common` they draw the same samples (the
same per-query C and majority answers); each trial's seed is in trials.csv."""

from __future__ import annotations

import csv

import optuna
import pytest
from helpers import SMALL_LAB, run

from dots.search.study.scorer import trial_seed

NEAR_TWINS = "search.fixed=[[1.0,1.0],[1.0,1.0001]]"


def scored(run_dir, seeds: str) -> tuple[list[dict], list]:
    extra = [NEAR_TWINS, f"search.seeds={seeds}", "search.adaptive.enabled=false", "search.k=6",
             "search.temperature=1.5", "seed=7", "export.enabled=false", f"run_dir={run_dir}"]  # fmt: skip
    run_dir = run(["backbone=lab", *SMALL_LAB, *extra])
    with open(run_dir / "fixed.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    db = f"sqlite:///{run_dir / 'study.db'}"
    (name,) = optuna.get_all_study_names(db)
    trials = optuna.load_study(study_name=name, storage=db).get_trials(deepcopy=False)
    return rows, trials


def test_common_seeds_give_near_twins_the_same_draws(tmp_path):
    rows, trials = scored(tmp_path / "common", "common")
    assert [int(r["sampling_seed"]) for r in rows] == [7, 7]
    first, second = (t.user_attrs for t in trials)
    assert first["per_query_consistency"] == second["per_query_consistency"]
    assert first["majority_answers"] == second["majority_answers"]
    assert any(first["majority_answers"]) and rows[0]["tokens_generated"] == rows[1]["tokens_generated"]


def test_per_trial_seeds_draw_independently(tmp_path):
    rows, trials = scored(tmp_path / "per_trial", "per_trial")
    assert [int(r["sampling_seed"]) for r in rows] == [7, 8]
    # at temperature 1.5, 4 queries × 6 samples drawn twice from one model do not repeat
    first, second = (t.user_attrs for t in trials)
    assert (first["per_query_consistency"], first["majority_answers"]) != (
        second["per_query_consistency"],
        second["majority_answers"],
    )


@pytest.mark.parametrize(("seeds", "expected"), [("common", [3, 3, 3]), ("per_trial", [3, 4, 5])])
def test_trial_seed(seeds, expected):
    assert [trial_seed(3, n, seeds) for n in range(3)] == expected
