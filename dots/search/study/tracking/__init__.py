"""Experiment tracking of a search (`tracking=none|mlflow|wandb`, docs/tracking.md).

One `Tracker` per backend. `open_tracking` checks, before any work and writing nothing, that the
backend's package imports and its service answers (else one line, exit 2). `Tracking` drives it:
the run's resolved config when the run starts; each scored trial (λ, objectives, tokens, phase
times: its trials.csv row, step = trial number; a trial pruned by the bound with pruned=1) as
it is told to Optuna, by the worker that scored it; at the end any scored trial not logged yet,
the pick, and the run's files (config.yaml, result.yaml, trials.csv, pareto.png). A trial
already logged is never logged again, so reruns and resumes are idempotent. The backends'
packages are imported only when chosen.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

from dots.options.search import TrackingOptions
from dots.registry import Registry
from dots.search.study.tracking.base import FILES, Tracker, flat, trial_metrics

__all__ = ["TRACKERS", "open_tracking"]

log = logging.getLogger("dots.search")

# a backend: its options (`tracking.*`) → its Tracker, unchecked (None: tracking=none); a backend's
# package is imported only when it is chosen. Its names are the ones TrackingOptions accepts
# (dots.options.search.TRACKERS; tests/test_registry.py checks they agree).
TRACKERS: Registry[Callable[[dict], Tracker | None]] = Registry("tracking backend")


@TRACKERS.register("none")
def _no_tracker(options: dict) -> None:
    return None


@TRACKERS.register("mlflow")
def _mlflow(options: dict) -> Tracker:
    from dots.search.study.tracking.mlflow_tracker import MlflowTracker

    return MlflowTracker(options)


@TRACKERS.register("wandb")
def _wandb(options: dict) -> Tracker:
    from dots.search.study.tracking.wandb_tracker import WandbTracker

    return WandbTracker(options)


def open_tracking(options: TrackingOptions) -> Tracking:
    """The tracking of a search, checked: its package imported and its service reached (one line,
    exit 2, before anything is written)."""
    tracker = TRACKERS.lookup(options.name)(dict(options.settings))
    if tracker is not None:
        tracker.check()
    return Tracking(tracker)


def scored(trial: Any) -> bool:
    """A trial with values to log: complete, or pruned by the bound (not a set-aside proposal)."""
    from optuna.trial import TrialState

    from dots.search.study.pruning import is_bound_pruned

    return trial.state == TrialState.COMPLETE or (trial.state == TrialState.PRUNED and is_bound_pruned(trial))


class Tracking:
    """A search's tracking (a no-op for tracking=none). Failures while the search runs do not
    stop it: one warning, and what was not logged is logged at the end (or by a rerun)."""

    def __init__(self, tracker: Tracker | None):
        self.tracker = tracker
        self.logged: set[int] = set()
        self.names: Callable[[], list[str]] = list
        self.failed = False

    def start(self, run: Any) -> None:
        """Open the backend's run for `run` (a `dots.search.run.Run`) and log its config."""
        if self.tracker is None:
            return
        self.names = lambda: run.param_names
        search = run.options.search
        self.logged = self.tracker.start(run.run_dir, dict(run.options.config), search.worker, search.workers)

    def callbacks(self) -> list[Callable[[Any, Any], None]]:
        """What `run_study` calls once a trial is told (nothing without tracking)."""
        return [] if self.tracker is None else [self.told]

    def told(self, study: Any, trial: Any) -> None:
        """Log a trial just told to Optuna (its stored row, as trials.csv has it)."""
        from dots.search.study.optuna_adapter import stored_trial, trial_id

        if self.tracker is None or self.failed:
            return
        try:
            frozen = stored_trial(study, trial_id(trial))
        except Exception as exc:  # (the study's storage: the search itself will say so if it lasts)
            return self._failed(trial.number, exc)
        if scored(frozen) and frozen.number not in self.logged:
            self._log(frozen)

    def _log(self, frozen: Any) -> None:
        from dots.search.pick.report import trial_row

        assert self.tracker is not None
        try:
            self.tracker.log_trial(frozen.number, trial_metrics(trial_row(frozen, self.names())))
        except Exception as exc:
            return self._failed(frozen.number, exc)
        self.logged.add(frozen.number)

    def _failed(self, number: int, exc: Exception) -> None:
        """One warning; no more trials are logged while the search runs (each try may wait for retries)."""
        self.failed = True
        log.warning("tracking: logging trial %d failed (%s); the trials left are logged at the end", number, exc)

    def finish(self, run: Any) -> None:
        """At the end: every scored trial not logged yet, the pick and the run's files; then close."""
        if self.tracker is None:
            return
        study = run.results.study
        trials = [t for t in study.get_trials(deepcopy=False) if scored(t)] if study is not None else []
        self.failed = False
        for frozen in trials:
            if frozen.number not in self.logged and not self.failed:
                self._log(frozen)
        try:
            if not self.failed:
                self.tracker.log_pick(len(trials), pick_values(run), [run.run_dir / f for f in FILES])
        except Exception as exc:
            self.failed = True
            log.warning("tracking: logging the pick and the run's files failed (%s)", exc)
        if self.failed:
            log.warning("tracking: the run is not fully logged: run the same command again to log what is missing")
        with contextlib.suppress(Exception):
            self.tracker.close("FINISHED")
        self.tracker = None

    def close(self, exc: BaseException) -> None:
        """The search stopped on `exc`: end the tracked run as KILLED (interrupted) or FAILED."""
        if self.tracker is None:
            return
        status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"
        try:
            self.tracker.close(status)
        except Exception as err:
            log.warning("tracking: could not mark the run %s (%s)", status, err)
        self.tracker = None


def pick_values(run: Any) -> dict[str, float]:
    """The pick as numbers (`pick/trial`, `pick/consistency`, `pick/perplexity`, `pick/<λ name>`);
    empty for search.fixed runs, which pick nothing."""
    result = run.results.pick
    if not result:
        return {}
    values = {"pick/trial": float(result["trial"]), **{f"pick/{k}": float(v) for k, v in result["objectives"].items()}}
    for name, value in flat(result["coefficients"]).items():  # {sft: λ} or {sft: {group: λ}}
        values["pick/lambda_" + name.replace(".", "_")] = float(value)
    return values
