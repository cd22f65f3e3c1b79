"""The Optuna study of a search (SPEC §4): storage, sampler, and the ask/tell loop.

Multi-objective (consistency ↑, perplexity ↓) with a seeded TPE sampler; the study lives
in a SQLite file of the run directory by default, or in a journal file / RDB for several
workers. `run_study` adds trials until the study holds `n_trials` complete ones, so a
rerun resumes and never re-runs completed trials.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

from dots.errors import DotsError
from dots.plain import to_plain
from dots.search.samplers import build_sampler
from dots.search.scorer import Scorer
from dots.search.workers import Heartbeat, fail_and_requeue, recover_stale_trials
from dots.signals import sigterm_deferred

log = logging.getLogger("dots.search")


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
        raise DotsError(f"cannot open the study storage {url!r}: {str(exc).splitlines()[0]}") from None


def open_study(cfg: Any, storage: Any, study_name: str) -> Any:
    """Create or load the study: two objectives, the configured sampler (`sampler=tpe|gp|
    nsga2|random`, dots.search.samplers) seeded per worker."""
    import optuna

    seed = int(cfg.seed) + 7919 * int(cfg.search.worker)
    sampler_opts = to_plain(cfg.sampler)
    sampler = build_sampler(sampler_opts, seed, int(cfg.search.workers))
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=sampler,
        directions=["maximize", "minimize"],
        load_if_exists=True,
    )
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
) -> None:
    """Ask/tell until the study holds n_trials complete trials (or the fixed points are scored).

    Safe with several workers on one storage: a worker never starts a trial beyond the
    target, waits while others run the last ones, and takes over a dead worker's trial
    once its heartbeat is older than `grace_s` (dots.search.workers)."""
    from optuna.trial import TrialState

    from dots.progress import new_progress

    names = [f"lambda_{s}" for s in sources]

    def count(*states: TrialState) -> int:
        return len(study.get_trials(deepcopy=False, states=states))

    if fixed is not None:

        def key(point: Any) -> tuple[float, ...]:
            return tuple(round(float(point[n]), 10) for n in names)

        done = {key(t.params) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        queued = {
            key(t.system_attrs["fixed_params"])
            for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if "fixed_params" in t.system_attrs
        }
        todo = [dict(zip(names, map(float, p))) for p in fixed]
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
    with new_progress("trials", status=True) as bar:
        task = bar.add_task("trials", total=target, completed=start, status="")
        while True:
            recover_stale_trials(study, grace_s, names)
            complete = count(TrialState.COMPLETE)
            if complete >= target:
                break
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
                    lam = {s: trial.suggest_float(n, *bounds) for s, n in zip(sources, names)}
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
                for name, value in (
                    ("per_query_consistency", res.per_query),
                    ("tokens_generated", res.tokens),
                    ("samples_drawn", res.samples),
                    ("time", res.times),
                ):
                    trial.set_user_attr(name, value)
                study.tell(trial, [res.consistency, res.perplexity])
            finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            best = max(finished, key=lambda t: (t.values[0], -t.values[1]))
            bar.update(
                task,
                completed=len(finished),
                status=f"best C={best.values[0]:.3f} ppl={best.values[1]:.3f} @ #{best.number}",
            )
            log.info(
                "trial %d: %s → C=%.4f PPL=%.4f (%.2fs)",
                trial.number,
                ", ".join(f"{k}={v:.3f}" for k, v in lam.items()),
                res.consistency,
                res.perplexity,
                res.times["total"],
            )
