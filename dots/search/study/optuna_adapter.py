"""The Optuna internals the study loop and the workers rely on, each reached here and only here.

Optuna has no public API for a trial's storage id, for writing a running trial's system
attributes from another thread (the heartbeat), for failing a trial another worker may
hold, or for reading the point a trial was enqueued with. Checked on the releases in
`CHECKED_ON` (their source: `Trial._trial_id`/`FrozenTrial._trial_id`, `Study._storage`,
`BaseStorage.get_trial`/`set_trial_system_attr`/`set_trial_state_values`, and
`Study.enqueue_trial` storing the point as the system attribute "fixed_params");
tests/test_optuna_adapter.py exercises each on a real study.
"""

from __future__ import annotations

from typing import Any

CHECKED_ON = ("4.0.0", "5.0.0")
ENQUEUED = "fixed_params"  # the system attribute Study.enqueue_trial stores the point in


def trial_id(trial: Any) -> int:
    """The storage id of a live `Trial` or a `FrozenTrial` (not its `number`)."""
    return int(trial._trial_id)


def stored_trial(study: Any, trial_id: int) -> Any:
    """The `FrozenTrial` the storage holds now for `trial_id` (fresh state and attributes)."""
    return study._storage.get_trial(trial_id)


def set_system_attr(study: Any, trial_id: int, key: str, value: Any) -> None:
    """Write a system attribute of a running trial without its `Trial` object (a heartbeat thread)."""
    study._storage.set_trial_system_attr(trial_id, key, value)


def mark_failed(study: Any, trial_id: int) -> None:
    """Set a RUNNING trial FAIL; raises when it has finished meanwhile (another worker won)."""
    from optuna.trial import TrialState

    study._storage.set_trial_state_values(trial_id, state=TrialState.FAIL)


def enqueued_point(trial: Any) -> dict[str, Any] | None:
    """The parameters a `FrozenTrial` was enqueued with (`Study.enqueue_trial`), else None."""
    point = trial.system_attrs.get(ENQUEUED)
    return dict(point) if point else None


def was_enqueued(study: Any, trial: Any) -> bool:
    """True when the live `trial` came from the queue rather than from the sampler."""
    return ENQUEUED in stored_trial(study, trial_id(trial)).system_attrs
