"""Exact dominance pruning (search.prune) and stopping a converged study (search.stop).

The bound is checked exhaustively on small random fronts: a trial the rule prunes, completed
to any consistency, is dominated and leaves the front and both picks as they were. Through
the real CLI (tiny generated checkpoints, transformers engine): pruned trials are recorded,
never picked and count toward search.n_trials; with two workers, the stop rule ends a study
early, says why in one line and in result.yaml, and holds on resume.
"""

from __future__ import annotations

import itertools
import random
import re

import optuna
import pytest
import yaml
from helpers import add_perfect_trial, compose, overrides, run_cli, run_together, study_of
from test_parallel import load, worker_cmd

from dots.search.pick.pareto import Point, pareto_front, pick
from dots.search.study.pruning import PRUNED_BY, consistency_bound, dominator
from dots.search.study.stopping import STOPPED, StopRule, hypervolume, relative_gain, stop_reason

GRID = [j / 4 for j in range(5)]  # per-query consistency of k = 4 samples


def completions(scored: list[float], n: int):
    """Every way the queries not yet scored can end (k = 4: consistency in GRID)."""
    for rest in itertools.product(GRID, repeat=n - len(scored)):
        yield scored + list(rest)


@pytest.mark.parametrize("seed", range(40))
def test_a_pruned_trial_completed_to_any_consistency_changes_neither_front_nor_pick(seed):
    """Exhaustive over completions, on random fronts with ties (a coarse PPL grid): whenever
    the rule prunes after b of Q queries, every completion is dominated by a complete trial,
    and adding it leaves the front and both picks unchanged. Conversely an unpruned trial can
    still reach the front (completing with 1.0 gives C = C_ub, which nothing dominates)."""
    rng = random.Random(seed)
    q = 4
    complete = [
        Point(i, sum(rng.choice(GRID) for _ in range(q)) / q, rng.choice([1.5, 2.0, 2.5]), {}) for i in range(6)
    ]
    pruned = kept = 0
    for _ in range(30):
        per_query = [rng.choice(GRID) for _ in range(q)]
        ppl = rng.choice([1.5, 2.0, 2.5])
        for b in range(1, q):
            scored = per_query[:b]
            bound = consistency_bound(scored, q)
            by = dominator([(p.number, p.consistency, p.perplexity) for p in complete], bound, ppl)
            if by is None:
                kept += 1
                best = Point(99, sum(scored + [1.0] * (q - b)) / q, ppl, {})
                assert best in pareto_front([*complete, best])
                continue
            pruned += 1
            for values in completions(scored, q):
                done = Point(99, sum(values) / len(values), ppl, {})
                assert done.consistency <= bound
                front = pareto_front([*complete, done])
                assert done not in front and front == pareto_front(complete)
                for rule in ("max_consistency", "knee"):
                    assert pick(front, rule) == pick(pareto_front(complete), rule)
            break
    assert pruned and kept  # the draw exercised both sides of the rule


def test_a_trial_that_could_tie_a_front_point_is_never_pruned():
    """C_ub and PPL equal to a complete trial's: not dominated (a tie could change the pick
    of max_consistency by trial number with several workers), so it runs on."""
    assert consistency_bound([1.0, 0.5], 4) == 0.875
    assert dominator([(0, 0.875, 2.0)], 0.875, 2.0) is None
    assert dominator([(0, 0.875, 1.999)], 0.875, 2.0) == 0
    assert dominator([(0, 0.876, 2.0)], 0.875, 2.0) == 0
    assert dominator([(0, float("nan"), 1.0)], 0.5, 2.0) is None


def test_hypervolume_of_a_staircase_and_the_relative_gain():
    assert hypervolume([(0.0, 1.0), (1.0, 0.0)], (2.0, 2.0)) == pytest.approx(3.0)
    assert hypervolume([(0.0, 1.0), (1.0, 0.0), (1.5, 1.5)], (2.0, 2.0)) == pytest.approx(3.0)  # dominated
    assert hypervolume([(3.0, 0.0)], (2.0, 2.0)) == 0.0  # outside the reference
    flat = [(0.5, 2.0), (0.9, 1.5)] + [(0.1, 3.0)] * 4  # the last four add nothing
    assert relative_gain(flat, 4) == 0.0
    assert relative_gain(flat[:2] + [(1.0, 1.2)], 1) > 0.1
    assert relative_gain([(0.5, 2.0), None, None], 2) == 0.0  # pruned trials add nothing


def test_the_stop_rule_waits_for_two_windows_fires_on_no_gain_and_is_kept():
    rule = StopRule("hypervolume", window=3, threshold=0.01)
    gains = [(0.1 * i, 3.0 - 0.1 * i) for i in range(5)]  # every trial improves the front
    assert stop_reason(study_of(gains), rule) is None
    stuck = study_of(gains[:3] + [(0.0, 9.0)] * 2)
    assert stop_reason(stuck, rule) is None  # five scored trials < 2·window
    stuck.add_trial(
        optuna.trial.create_trial(
            params={"x": 0.9}, distributions={"x": optuna.distributions.FloatDistribution(0.0, 1.0)}, values=[0, 9]
        )
    )
    reason = stop_reason(stuck, rule)
    assert reason and "after 6 scored trials" in reason
    assert stuck.user_attrs[STOPPED]["trials"] == 6
    assert stop_reason(stuck, rule) == reason  # kept: a resume or another worker stops too
    assert stop_reason(stuck, StopRule("none")) is None  # rule none: the study goes on


def test_pruned_trials_through_the_cli_are_recorded_counted_and_never_picked(tiny, tmp_path):
    """sampler=random draws the same points with and without pruning: the runs' fronts and
    picks are identical, the pruned run's trials after the perfect one are PRUNED after one
    block with their partial values and bound, and cost fewer tokens."""
    runs = {}
    for prune in ("false", "true"):
        run_dir, db = tmp_path / f"prune-{prune}", f"sqlite:///{tmp_path / f's-{prune}.db'}"
        add_perfect_trial(db, "s")
        extra = [
            "sampler=random",
            "search.batch=1",
            f"search.prune={prune}",
            f"search.storage={db}",
            "search.study_name=s",
            "export.enabled=false",
        ]
        proc = run_cli("dots.search", *overrides(tiny, run_dir, trials=4, extra=extra))
        assert proc.returncode == 0, proc.stderr
        result = yaml.safe_load((run_dir / "result.yaml").read_text())
        study = optuna.load_study(study_name="s", storage=db)
        runs[prune] = (result, study.get_trials())
    (on, on_trials), (off, off_trials) = runs["true"], runs["false"]
    assert on["front"] == off["front"] and on["trial"] == off["trial"] == 0
    assert [t.params for t in on_trials] == [t.params for t in off_trials]
    pruned = [t for t in on_trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(pruned) == 3 and on["pruned_trials"] == 3 and on["complete_trials"] == 1
    for t, full in zip(pruned, off_trials[1:]):
        record = t.user_attrs[PRUNED_BY]
        assert record["queries_scored"] == 1 and record["queries"] == 3 and record["dominated_by"] == 0
        assert record["consistency_bound"] == pytest.approx((record["consistency_partial"] + 2) / 3)
        assert record["perplexity"] == pytest.approx(full.values[1])  # PPL first, exactly the full run's
        assert t.user_attrs["per_query_consistency"] == full.user_attrs["per_query_consistency"][:1]
        assert t.user_attrs["tokens_generated"] < full.user_attrs["tokens_generated"]


def test_new_options_keep_the_identity_of_runs_made_before_them():
    """search.batch/prune enter a run's identity only away from their defaults; search.stop never
    (a stopped study goes on with the rule off), like n_trials."""
    from omegaconf import open_dict

    from dots.search.identity import run_identity

    class Fingerprinted:
        def fingerprint(self):
            return "x"

    def identity(cfg):
        return run_identity(cfg, Fingerprinted(), {"sft": Fingerprinted()})

    before = compose([])
    with open_dict(before):
        for key in ("batch", "prune", "stop"):
            del before.search[key]
    assert identity(compose([])) == identity(before)
    assert identity(compose(["search.stop.rule=hypervolume", "search.stop.window=3"])) == identity(before)
    assert identity(compose(["search.prune=true"]))["search"]["prune"] is True
    assert identity(compose(["search.batch=16"]))["search"]["batch"] == 16


@pytest.mark.parametrize(
    "extra, message",
    [
        ("search.prune=3", "search.prune must be true or false"),
        ("search.batch=0", "search.batch"),
        ("search.stop.rule=plateau", "search.stop.rule must be one of none, hypervolume"),
        ("search.stop.window=0", "search.stop.window must be >= 1"),
        ("search.stop.threshold=1.5", "search.stop.threshold must be in [0, 1)"),
    ],
)
def test_bad_prune_and_stop_options_are_one_line(extra, message):

    from dots.errors import DotsError
    from dots.options.study import study_options

    with pytest.raises(DotsError, match=re.escape(message)):
        study_options(compose([extra]).search)


def test_two_workers_prune_against_the_shared_front_and_stop_together(tiny, tmp_path):
    """Two workers on one journal study holding a perfect trial: each prunes its trials against
    the front it reads from the storage, and the stop rule (no gain: the perfect trial dominates
    everything) ends the study for both at 2·window scored trials, recorded in result.yaml."""

    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    run_dir, storage = tmp_path / "run", tmp_path / "study.journal"
    add_perfect_trial(JournalStorage(JournalFileBackend(str(storage))), "s")
    extra = [
        "search.study_name=s",
        "search.prune=true",
        "search.batch=1",
        "search.stop.rule=hypervolume",
        "search.stop.window=2",
        "search.stop.threshold=0.995",
    ]
    outs = run_together([worker_cmd(tiny, run_dir, storage, 12, w, extra) for w in (0, 1)])
    trials = load(storage).get_trials()
    scored = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE or PRUNED_BY in t.user_attrs]
    assert [t.number for t in scored if t.state == optuna.trial.TrialState.COMPLETE] == [0]
    assert all(t.user_attrs[PRUNED_BY]["dominated_by"] == 0 for t in scored[1:])
    assert 4 <= len(scored) <= 5 < 12  # the rule fires at 4; the other worker may finish one more
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert result["stopped"]["trials"] == 4 and result["pruned_trials"] == len(scored) - 1
    assert all(o.count(result["stopped"]["reason"]) == 1 for o in outs)  # one line each
    again = run_cli("dots.search", *worker_cmd(tiny, run_dir, storage, 12, 0, extra)[3:])  # a resume
    assert again.returncode == 0, again.stderr
    assert result["stopped"]["reason"] in again.stdout
    assert len(load(storage).get_trials()) == len(trials)


def test_a_proposal_of_a_pruned_point_is_set_aside_as_a_duplicate():
    """A bound-pruned point is scored: proposed again, it is set aside like a complete one (as it
    would be without pruning), not generated again."""
    from dots.search.study.trials import DUPLICATE_OF, set_aside_duplicate

    class Stuck(optuna.samplers.BaseSampler):
        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_relative(self, study, trial, search_space):
            return {}

        def sample_independent(self, study, trial, name, distribution):
            return 0.5

        def reseed_rng(self):
            pass

    names = ["lambda_a", "lambda_b"]
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=Stuck())
    dist = {n: optuna.distributions.FloatDistribution(0.0, 2.0) for n in names}
    study.add_trial(
        optuna.trial.create_trial(
            params={n: 0.5 for n in names},
            distributions=dist,
            state=optuna.trial.TrialState.PRUNED,
            user_attrs={PRUNED_BY: {"queries_scored": 16}},
        )
    )
    trial = study.ask()
    for n in names:
        trial.suggest_float(n, 0.0, 2.0)
    assert set_aside_duplicate(study, trial, names)
    assert study.trials[-1].user_attrs[DUPLICATE_OF] == 0
