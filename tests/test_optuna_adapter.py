"""Each Optuna internal of dots.search.study.optuna_adapter on a real study (SQLite, as a run uses):
run this file under a new Optuna release before adding it to `CHECKED_ON`."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from dots.search.study import optuna_adapter as adapter


@pytest.fixture
def study(tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    return optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))


def test_trial_ids_and_stored_trials(study):
    first, second = study.ask(), study.ask()
    ids = [adapter.trial_id(first), adapter.trial_id(second)]
    assert ids[0] != ids[1]
    assert [adapter.trial_id(t) for t in study.get_trials(deepcopy=False)] == ids  # FrozenTrial: the same id
    assert adapter.stored_trial(study, ids[1]).number == second.number
    adapter.set_system_attr(study, ids[0], "dots_heartbeat", 12.5)
    assert adapter.stored_trial(study, ids[0]).system_attrs["dots_heartbeat"] == 12.5


def test_enqueued_points_are_told_apart_from_sampled_ones(study):
    sampled = study.ask()
    sampled.suggest_float("x", 0, 1)
    study.enqueue_trial({"x": 0.25})
    queued = study.ask()
    assert queued.suggest_float("x", 0, 1) == 0.25
    assert adapter.was_enqueued(study, queued) and not adapter.was_enqueued(study, sampled)
    assert adapter.enqueued_point(adapter.stored_trial(study, adapter.trial_id(queued))) == {"x": 0.25}
    assert adapter.enqueued_point(adapter.stored_trial(study, adapter.trial_id(sampled))) is None


def test_a_running_trial_is_failed_once(study):
    trial = study.ask()
    adapter.mark_failed(study, adapter.trial_id(trial))
    assert adapter.stored_trial(study, adapter.trial_id(trial)).state == TrialState.FAIL
    with pytest.raises(RuntimeError):  # finished (UpdateFinishedTrialError): another worker won
        adapter.mark_failed(study, adapter.trial_id(trial))


def test_an_interrupted_trial_is_retried_at_its_point_once(study):
    """dots.search.study.workers: a RUNNING trial is failed and its point enqueued again, tagged
    with the trial it retries; an enqueued point wins, a sampled one counts only when every
    coefficient was drawn, and a trial no longer RUNNING is left alone."""
    from dots.search.study.workers import RETRY_OF, fail_and_requeue, retry_point

    names = ["sft", "rlvr"]
    half = study.ask()
    half.suggest_float("sft", 0.0, 2.0)  # cut off before its second coefficient
    frozen = adapter.stored_trial(study, adapter.trial_id(half))
    assert retry_point(frozen, names) is None and retry_point(frozen) == frozen.params
    assert retry_point(adapter.stored_trial(study, adapter.trial_id(study.ask())), names) is None  # nothing drawn
    study.enqueue_trial({"sft": 1.25, "rlvr": 0.5})
    queued = study.ask()
    assert retry_point(adapter.stored_trial(study, adapter.trial_id(queued)), names) == {"sft": 1.25, "rlvr": 0.5}

    assert fail_and_requeue(study, adapter.trial_id(queued), names)
    assert adapter.stored_trial(study, adapter.trial_id(queued)).state == TrialState.FAIL
    retry = study.ask()
    assert {n: retry.suggest_float(n, 0.0, 2.0) for n in names} == {"sft": 1.25, "rlvr": 0.5}
    assert retry.user_attrs[RETRY_OF] == queued.number
    assert not fail_and_requeue(study, adapter.trial_id(queued), names)  # FAIL already: the other worker won
    waiting = len(study.get_trials(states=(TrialState.WAITING,)))
    assert fail_and_requeue(study, adapter.trial_id(half), names)  # failed, but nothing to retry
    assert len(study.get_trials(states=(TrialState.WAITING,))) == waiting


def test_a_trial_another_worker_finishes_first_is_neither_failed_nor_retried(study, monkeypatch):
    """The race fail_and_requeue loses: the trial is RUNNING when read, but another worker tells it
    before it is marked FAIL; Optuna refuses to change a finished trial, and the point is not queued."""
    import dots.search.study.workers as workers

    trial = study.ask()
    for name in ("sft", "rlvr"):
        trial.suggest_float(name, 0.0, 2.0)
    marked = workers.mark_failed

    def finished_first(study, trial_id):
        study.tell(trial, 0.5)  # the other worker wins
        return marked(study, trial_id)

    monkeypatch.setattr(workers, "mark_failed", finished_first)
    waiting = len(study.get_trials(states=(TrialState.WAITING,)))
    assert workers.fail_and_requeue(study, adapter.trial_id(trial), ["sft", "rlvr"]) is False
    assert adapter.stored_trial(study, adapter.trial_id(trial)).state == TrialState.COMPLETE
    assert len(study.get_trials(states=(TrialState.WAITING,))) == waiting
