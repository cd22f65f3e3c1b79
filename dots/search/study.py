"""The Optuna study of a search (SPEC §4): storage, sampler, and the ask/tell loop.

Multi-objective (consistency ↑, perplexity ↓) with a seeded TPE sampler; the study lives
in a SQLite file of the run directory by default, or in a journal file / RDB for several
workers. `run_study` adds trials until the study holds `n_trials` complete ones, so a
rerun resumes and never re-runs completed trials. A rerun's sampler is seeded past the
trials the study already holds (a restarted seeded sampler would draw its first points
again), and a proposal equal to a point already scored is set aside and drawn again.
The parameters are one λ per source, or one per source and module group
(`search.granularity`, dots.search.granularity).
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

from dots.errors import DotsError
from dots.plain import to_plain
from dots.runtime.signals import sigterm_deferred
from dots.search.granularity import DEFAULT_GRANULARITY, coefficients_from_params, fixed_point, param_names
from dots.search.pruning import attach, count_bound_pruned, is_bound_pruned, outcome, tell_scored
from dots.search.samplers import build_sampler
from dots.search.scorer import Scorer
from dots.search.stopping import StopRule, stop_reason
from dots.search.workers import Heartbeat, fail_and_requeue, recover_stale_trials
from dots.vectors.coefficients import format_coefficients

log = logging.getLogger("dots.search")

DUPLICATE_OF = "dots_duplicate_of"
MAX_DUPLICATES = 3  # proposals of scored points in a row before a uniform random point is enqueued


def sampler_seed(seed: int, worker: int, n_existing: int) -> int:
    """The sampler seed of this process: the configured seed, apart per worker, and moved on by the
    trials the study already holds, so a resumed, requeued or extra worker does not replay the
    points of the first run (a fresh study, n_existing = 0, keeps the configured sequence)."""
    return int(seed) + 7919 * int(worker) + int(n_existing)


def point_key(params: Any, names: list[str]) -> tuple[float, ...]:
    """A point's coefficients, rounded so that equal floats from storage compare equal."""
    return tuple(round(float(params[n]), 10) for n in names)


def open_storage(url: str | None, run_dir: Path) -> Any:
    """SQLite in the run dir by default; a `*.journal`/`*.log` path → journal file; else an RDB URL."""
    from optuna.storages import JournalStorage, RDBStorage

    if not url:
        url = f"sqlite:///{(run_dir / 'study.db').resolve()}"
    try:
        if url.endswith((".journal", ".log")) and "://" not in url:
            from optuna.storages.journal import JournalFileBackend

            Path(url).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(url))
        if url.startswith("sqlite"):
            return RDBStorage(url)
        return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:
        raise storage_error(url, exc) from None


def storage_error(url: str, exc: BaseException) -> DotsError:
    """One line for a storage that fails: a damaged SQLite file says so and how to recover."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if url.startswith("sqlite:///") and ("malformed" in first or "not a database" in first):
        path = url[len("sqlite:///") :]
        return DotsError(
            f"the study file {path} is damaged ({first.split(') ')[-1]}): restore it from a copy, or move it "
            "away and rerun to start the study again (its trials are lost; the selection and τ̃ are kept)"
        )
    return DotsError(f"cannot open the study storage {url!r}: {first}")


def open_study(cfg: Any, storage: Any, study_name: str) -> Any:
    """Create or load the study: two objectives, the configured sampler (`sampler=tpe|gp|
    nsga2|random`, dots.search.samplers) seeded per worker and past the trials the study
    already holds (`sampler_seed`), so a resumed study does not replay its sequence."""
    import optuna

    try:  # a damaged SQLite file may open and fail at its first read
        study = optuna.create_study(
            study_name=study_name,
            storage=storage,
            directions=["maximize", "minimize"],
            load_if_exists=True,
        )
        n_existing = len(study.get_trials(deepcopy=False))
    except Exception as exc:
        raise storage_error(str(getattr(getattr(storage, "engine", None), "url", "") or ""), exc) from None
    sampler_opts = to_plain(cfg.sampler)
    seed = sampler_seed(cfg.seed, cfg.search.worker, n_existing)
    study.sampler = build_sampler(sampler_opts, seed, int(cfg.search.workers))
    study.set_user_attr("sampler", sampler_opts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["consistency", "perplexity"])
    return study


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
) -> None:
    """Ask/tell until the study holds n_trials complete trials (or the fixed points are scored).

    Each trial draws `param_names(sources, granularity)` in `bounds` and is scored at the
    coefficients they make (`coefficients_from_params`); a fixed point is read by `fixed_point`.
    Safe with several workers on one storage: a worker never starts a trial beyond the
    target, waits while others run the last ones, and takes over a dead worker's trial
    once its heartbeat is older than `grace_s` (dots.search.workers). Trials pruned by the bound
    count as scored (dots.search.pruning); `stop` may end the study early (dots.search.stopping)."""
    from optuna.trial import TrialState

    from dots.runtime.progress import new_progress

    names = param_names(sources, granularity)

    def count(*states: TrialState) -> int:  # COMPLETE counts the trials pruned by the bound too
        n = len(study.get_trials(deepcopy=False, states=states))
        return n + count_bound_pruned(study) if TrialState.COMPLETE in states else n

    attach(scorer, study, fixed is None)

    def key(point: Any) -> tuple[float, ...]:
        return point_key(point, names)

    if fixed is not None:
        done = {key(t.params) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        queued = {
            key(t.system_attrs["fixed_params"])
            for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if "fixed_params" in t.system_attrs
        }
        todo = [dict(zip(names, fixed_point(p, sources, granularity))) for p in fixed]
        todo = [p for p in todo if key(p) not in done]
        for point in todo:  # (not skip_if_exists: a FAILed trial of the point must not hide it)
            if key(point) not in queued:
                study.enqueue_trial(point)
                queued.add(key(point))
        target = count(TrialState.COMPLETE) + len(todo)
    else:
        target = n_trials
    start = count(TrialState.COMPLETE)
    if start >= target:
        log.info("study already has %d complete trials", start)
        return
    repeats = 0  # duplicate proposals in a row
    with new_progress("trials", status=True) as bar:
        task = bar.add_task("trials", total=target, completed=start, status="")
        while True:
            recover_stale_trials(study, grace_s, names)
            complete = count(TrialState.COMPLETE)
            if complete >= target:
                break
            reason = stop_reason(study, stop) if fixed is None else None
            if reason:  # converged: let running trials finish, then say why in one line
                if count(TrialState.RUNNING) == 0:
                    print(reason)
                    break
                time.sleep(poll_s)
                continue
            if complete + count(TrialState.RUNNING) >= target:  # others are running the last trials
                time.sleep(poll_s)
                continue
            trial = None
            try:
                with sigterm_deferred():  # a SIGTERM here lands after the suggestions, in the except
                    trial = study.ask()
                    if count(TrialState.COMPLETE) + count(TrialState.RUNNING) - 1 >= target:  # lost a race
                        study.tell(trial, state=TrialState.PRUNED)
                        trial = None
                        continue
                    params = {n: trial.suggest_float(n, *bounds) for n in names}
                    lam = coefficients_from_params(params, sources, granularity)
                    if fixed is None and set_aside_duplicate(study, trial, names):
                        trial, repeats = None, repeats + 1
                        if repeats >= MAX_DUPLICATES:  # a sampler stuck on a point: break the loop
                            enqueue_random_point(study, names, bounds, seed)
                            repeats = 0
                        continue
                    repeats = 0
                with Heartbeat(study, trial._trial_id, heartbeat_s):
                    res = scorer(lam, seed=seed + trial.number)
            except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: the point is redone on resume
                if trial is not None:
                    with sigterm_deferred():
                        fail_and_requeue(study, trial._trial_id, names)
                raise
            except BaseException:
                if trial is not None:
                    study.tell(trial, state=TrialState.FAIL)
                raise
            with sigterm_deferred():
                tell_scored(study, trial, res)
            finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            best = max(finished, key=lambda t: (t.values[0], -t.values[1]))
            bar.update(
                task,
                completed=len(finished),
                status=f"best C={best.values[0]:.3f} ppl={best.values[1]:.3f} @ #{best.number}",
            )
            log.info(
                "trial %d: %s → %s (%.2fs)",
                trial.number,
                format_coefficients(lam),
                outcome(res),
                res.times["total"],
            )


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
    proposed a point that a complete, running or bound-pruned trial already has; an enqueued point (a retry
    of an interrupted trial) is never a duplicate."""
    from optuna.trial import TrialState

    if "fixed_params" in study._storage.get_trial(trial._trial_id).system_attrs:
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
