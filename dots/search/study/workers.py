"""Several workers on one study: heartbeats, recovery of dead workers' trials, file locks.

Workers share the run directory (a cluster filesystem) and the Optuna storage (a journal
file, whose symlink lock holds on NFS, or an RDB URL). A running trial carries a
heartbeat (a user attribute refreshed by a background thread); a RUNNING trial whose
heartbeat is older than the grace period belongs to a dead worker: it is marked FAIL and
its coefficients are enqueued again, so no point is lost and none is evaluated twice to
completion. Stages that must run once (task vectors, selection, pick and export) are
guarded by `dots.runtime.locks.run_once_lock` (see `dots.search.stages`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dots.search.study.optuna_adapter import enqueued_point, mark_failed, set_system_attr, stored_trial, trial_id

__all__ = ["HEARTBEAT", "RETRY_OF", "fail_and_requeue", "recover_stale_trials", "retry_point"]

log = logging.getLogger(__name__)

HEARTBEAT = "dots_heartbeat"
RETRY_OF = "dots_retry_of"


class Heartbeat:
    """Refresh a trial's heartbeat every `interval` seconds until stopped."""

    def __init__(self, study: Any, trial_id: int, interval: float):
        self._study = study
        self._trial_id = trial_id
        self._interval = interval
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name="dots-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        set_system_attr(self._study, self._trial_id, HEARTBEAT, time.time())

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception:  # the trial may have finished meanwhile
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def retry_point(trial: Any, names: list[str] | None = None) -> dict[str, Any] | None:
    """The coefficients an interrupted trial should be evaluated at again: the point it was
    enqueued with, else its suggested parameters when all of `names` were drawn; None when
    it was cut off before (it evaluated nothing, so a fresh trial loses nothing)."""
    enqueued = enqueued_point(trial)
    if enqueued:
        return enqueued
    if trial.params and (names is None or set(trial.params) == set(names)):
        return dict(trial.params)
    return None


def fail_and_requeue(study: Any, running_id: int, names: list[str] | None = None) -> bool:
    """Mark a RUNNING trial FAIL and enqueue its point again (`retry_point`), tagged with
    RETRY_OF. False, doing nothing, if the trial is no longer RUNNING: only one worker wins
    this transition, so only one re-enqueues the point."""
    from optuna.trial import TrialState

    trial = stored_trial(study, running_id)
    if trial.state != TrialState.RUNNING:
        return False
    try:
        mark_failed(study, running_id)
    except Exception:  # finished or recovered by another worker in the meantime
        return False
    point = retry_point(trial, names)
    if point:  # (Optuna's skip_if_exists would match the failed trial itself)
        study.enqueue_trial(point, user_attrs={RETRY_OF: trial.number})
    return True


def recover_stale_trials(
    study: Any, grace_s: float, names: list[str] | None = None, left_by: str = "a dead worker"
) -> list[int]:
    """Mark RUNNING trials without a fresh heartbeat FAIL and enqueue their coefficients again;
    said in one log line (`left_by` names who left them running)."""
    from optuna.trial import TrialState

    now = time.time()
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        beat = trial.system_attrs.get(HEARTBEAT)
        if beat is None and trial.datetime_start is not None:
            beat = trial.datetime_start.timestamp()
        if beat is not None and now - float(beat) <= grace_s:
            continue
        if fail_and_requeue(study, trial_id(trial), names):
            recovered.append(trial.number)
    if recovered:
        log.warning(
            "trial(s) %s left running by %s were marked failed; their coefficients are queued again",
            recovered,
            left_by,
        )
    return recovered
