"""The Optuna study of a search (docs/method.md §4): storage, sampler, and the ask/tell loop.

Multi-objective (consistency ↑, perplexity ↓) with a seeded TPE sampler; the study lives
in a SQLite file of the run directory by default, or in a journal file / RDB for several
workers. `run_study` adds trials until the study holds `n_trials` complete ones, so a
rerun resumes and never re-runs completed trials. A rerun's sampler is seeded past the
trials the study already holds (a restarted seeded sampler would draw its first points
again), and a proposal equal to a point already scored is set aside and drawn again.
The parameters are one λ per source, or one per source and module group
(`search.granularity`, dots.search.study.granularity).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from optuna.trial import TrialState

from dots.runtime.signals import sigterm_deferred
from dots.search.study.granularity import DEFAULT_GRANULARITY, coefficients_from_params, fixed_point, param_names
from dots.search.study.optuna_adapter import enqueued_point, trial_id, was_enqueued
from dots.search.study.pruning import attach, count_bound_pruned, is_bound_pruned, outcome, tell_scored
from dots.search.study.scorer import Scorer, trial_seed
from dots.search.study.stopping import StopRule, stop_reason
from dots.search.study.workers import Heartbeat, fail_and_requeue, recover_stale_trials
from dots.vectors.coefficients import format_coefficients

__all__ = ["DUPLICATE_OF", "MAX_DUPLICATES", "point_key", "run_study", "set_aside_duplicate"]

log = logging.getLogger("dots.search")

DUPLICATE_OF = "dots_duplicate_of"
MAX_DUPLICATES = 3  # proposals of scored points in a row before a uniform random point is enqueued


def point_key(params: Any, names: list[str]) -> tuple[float, ...]:
    """A point's coefficients, rounded so that equal floats from storage compare equal."""
    return tuple(round(float(params[n]), 10) for n in names)


def run_study(
    study: Any,
    scorer: Scorer,
    sources: list[str],
    bounds: tuple[float, float],
    n_trials: int,
    seed: int,
    fixed: list[list[float]] | None = None,
    heartbeat_s: float = 30.0,
    grace_s: float = 120.0,
    poll_s: float = 2.0,
    granularity: str = DEFAULT_GRANULARITY,
    stop: StopRule | None = None,
    told: Sequence[Callable[[Any, Any], None]] = (),
    seeds: str = "per_trial",
    status: Callable[[Any], str] | None = None,
) -> None:
    """Ask/tell until the study holds n_trials complete trials (or the fixed points are scored).

    Each trial draws `param_names(sources, granularity)` in `bounds` and is scored at the
    coefficients they make (`coefficients_from_params`); a fixed point is read by `fixed_point`.
    Safe with several workers on one storage: a worker never starts a trial beyond the
    target, waits while others run the last ones, and takes over a dead worker's trial
    once its heartbeat is older than `grace_s` (dots.search.study.workers). Trials pruned by the bound
    count as scored (dots.search.study.pruning); `stop` may end the study early (dots.search.study.stopping);
    each of `told` is called with (study, trial) once a trial is told (dots.search.study.tracking);
    `seeds` gives each trial its sampling seed (`trial_seed`: common or per trial); `status(study)`
    is the progress bar's text after each trial (the pick as it stands; default: the highest C)."""
    from dots.runtime.progress import new_progress

    attach(scorer, study, fixed is None)
    loop = StudyLoop(
        study, scorer, sources, bounds, seed, fixed, heartbeat_s, grace_s, poll_s, granularity, stop, told, seeds,
        status,
    )  # fmt: skip
    target = loop.resume(n_trials)
    start = loop.count(TrialState.COMPLETE)
    if start >= target:
        log.info("study already has %d complete trials", start)
        return
    with new_progress("trials", status=True) as bar:
        task = bar.add_task("trials", total=target, completed=start, status="")
        while loop.wait_for_room(target):
            proposal = loop.ask(target)
            if proposal is None:  # lost a race for the last trial, or a point already scored
                continue
            result = loop.score(proposal)
            loop.tell(proposal, result)
            loop.show(proposal, result, bar, task)
        done = next(t.completed for t in bar.tasks if t.id == task)
        bar.update(task, total=done)  # (stopped early: the bar ends full, its eta at zero)


@dataclass
class Proposal:
    """A trial this worker asked for, and the coefficients its parameters make."""

    trial: Any
    coefficients: Any


@dataclass
class StudyLoop:
    """The steps of `run_study` for one worker: resume, wait for room, ask (setting aside
    duplicates), score, tell, and give the trial back when interrupted."""

    study: Any
    scorer: Scorer
    sources: list[str]
    bounds: tuple[float, float]
    seed: int
    fixed: list[list[float]] | None
    heartbeat_s: float
    grace_s: float
    poll_s: float
    granularity: str
    stop: StopRule | None = None
    told: Sequence[Callable[[Any, Any], None]] = ()  # called once a trial is told
    seeds: str = "per_trial"  # search.seeds: common | per_trial (dots.search.study.scorer.trial_seed)
    status: Callable[[Any], str] | None = None  # the progress bar's text after a trial
    repeats: int = 0  # duplicate proposals in a row
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = param_names(self.sources, self.granularity)

    def trials(self, *states: TrialState) -> list[Any]:
        return self.study.get_trials(deepcopy=False, states=states)

    def count(self, *states: TrialState) -> int:
        """How many trials are in `states`; COMPLETE counts the trials pruned by the bound too."""
        n = len(self.trials(*states))
        return n + count_bound_pruned(self.study) if TrialState.COMPLETE in states else n

    def key(self, point: Any) -> tuple[float, ...]:
        return point_key(point, self.names)

    def resume(self, n_trials: int) -> int:
        """The number of complete trials to reach: n_trials, or with fixed points those complete
        plus the points not scored yet, each enqueued unless a waiting or running trial has it."""
        if self.fixed is None:
            return n_trials
        done = {self.key(t.params) for t in self.trials(TrialState.COMPLETE)}
        queued = {
            self.key(p)
            for t in self.trials(TrialState.WAITING, TrialState.RUNNING)
            if (p := enqueued_point(t)) is not None
        }
        todo = [dict(zip(self.names, fixed_point(p, self.sources, self.granularity))) for p in self.fixed]
        todo = [p for p in todo if self.key(p) not in done]
        for point in todo:  # (not skip_if_exists: a FAILed trial of the point must not hide it)
            if self.key(point) not in queued:
                self.study.enqueue_trial(point)
                queued.add(self.key(point))
        return self.count(TrialState.COMPLETE) + len(todo)

    def wait_for_room(self, target: int) -> bool:
        """True once this worker may start a trial; False when the study holds `target` complete
        ones. Meanwhile it takes over dead workers' trials and waits while others run the last."""
        while True:
            recover_stale_trials(self.study, self.grace_s, self.names)
            complete = self.count(TrialState.COMPLETE)
            if complete >= target:
                return False
            reason = stop_reason(self.study, self.stop) if self.fixed is None else None
            if reason:  # converged: let running trials finish, then say why in one line
                if self.count(TrialState.RUNNING) == 0:
                    print(reason)
                    return False
            elif complete + self.count(TrialState.RUNNING) < target:
                return True
            time.sleep(self.poll_s)

    def ask(self, target: int) -> Proposal | None:
        """Ask for a trial and draw its parameters, uninterrupted by SIGTERM; None when another
        worker took the last trial first or the sampler proposed a point already scored."""
        trial = None
        try:
            with sigterm_deferred():  # a SIGTERM here lands after the suggestions, in the except
                trial = self.study.ask()
                if self.count(TrialState.COMPLETE) + self.count(TrialState.RUNNING) - 1 >= target:  # lost a race
                    self.study.tell(trial, state=TrialState.PRUNED)
                    trial = None
                    return None
                params = {n: trial.suggest_float(n, *self.bounds) for n in self.names}
                coefficients = coefficients_from_params(params, self.sources, self.granularity)
                if self.fixed is None and set_aside_duplicate(self.study, trial, self.names):
                    trial, self.repeats = None, self.repeats + 1
                    if self.repeats >= MAX_DUPLICATES:  # a sampler stuck on a point: break the loop
                        enqueue_random_point(self.study, self.names, self.bounds, self.seed)
                        self.repeats = 0
                    return None
                self.repeats = 0
                return Proposal(trial, coefficients)
        except BaseException as exc:
            if trial is not None:
                self.give_back(trial, exc)
            raise

    def score(self, proposal: Proposal) -> Any:
        """Score the trial's coefficients while its heartbeat runs."""
        trial = proposal.trial
        try:
            with Heartbeat(self.study, trial_id(trial), self.heartbeat_s):
                return self.scorer(proposal.coefficients, seed=trial_seed(self.seed, trial.number, self.seeds))
        except BaseException as exc:
            self.give_back(trial, exc)
            raise

    def give_back(self, trial: Any, exc: BaseException) -> None:
        """Interrupted (Ctrl-C, SIGTERM): the trial fails and its point is queued again, so a
        resume redoes it; any other error: the trial is told FAIL."""
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            with sigterm_deferred():
                fail_and_requeue(self.study, trial_id(trial), self.names)
        else:
            self.study.tell(trial, state=TrialState.FAIL)

    def tell(self, proposal: Proposal, res: Any) -> None:
        """Record the scores and the trial's details, uninterrupted by SIGTERM."""
        with sigterm_deferred():
            tell_scored(self.study, proposal.trial, res)
        for callback in self.told:  # (outside: a SIGTERM need not wait for a tracking server)
            callback(self.study, proposal.trial)

    def show(self, proposal: Proposal, res: Any, bar: Any, task: Any) -> None:
        """The progress bar with the best trial so far, and one log line for this trial."""
        finished = self.trials(TrialState.COMPLETE)
        best = max(finished, key=lambda t: (t.values[0], -t.values[1]))
        text = self.status(self.study) if self.status else f"highest C {best.values[0]:.3f} (#{best.number})"
        bar.update(task, completed=len(finished), status=text)
        point, took = format_coefficients(proposal.coefficients), res.times["total"]
        log.info("trial %d: %s → %s (%.2fs)", proposal.trial.number, point, outcome(res), took)


def enqueue_random_point(study: Any, names: list[str], bounds: tuple[float, float], seed: int) -> None:
    """Enqueue a uniform random point, seeded by `seed` and the study's trial count. A sampler
    whose proposal does not change with its seed — GPSampler with its acquisition optimum on a
    point already scored, e.g. a corner of the range — would otherwise be asked forever."""
    import random

    rng = random.Random(int(seed) * 1_000_003 + len(study.get_trials(deepcopy=False)))
    point = {n: rng.uniform(*bounds) for n in names}
    study.enqueue_trial(point)
    log.warning(
        "the sampler proposed scored points %d times in a row; the next trial is a random point (%s)",
        MAX_DUPLICATES,
        ", ".join(f"{k}={v:.3f}" for k, v in point.items()),
    )


def set_aside_duplicate(study: Any, trial: Any, names: list[str]) -> bool:
    """True (the trial told PRUNED, tagged DUPLICATE_OF, the sampler reseeded) when the sampler
    proposed a point that a complete, running or bound-pruned trial already has; an enqueued
    point (a retry of an interrupted trial) is never a duplicate."""
    if was_enqueued(study, trial):
        return False
    mine = point_key(trial.params, names)
    for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)):
        if other.state == TrialState.PRUNED and not is_bound_pruned(other):  # (a set-aside proposal)
            continue
        if other.number != trial.number and set(other.params) == set(names) and point_key(other.params, names) == mine:
            trial.set_user_attr(DUPLICATE_OF, other.number)
            study.tell(trial, state=TrialState.PRUNED)
            study.sampler.reseed_rng()
            log.warning(
                "trial %d proposed the coefficients of trial %d again; drawing another point",
                trial.number,
                other.number,
            )
            return True
    return False
