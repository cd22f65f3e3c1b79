"""Several worker processes on one study (a journal file, and a real MariaDB database through an
RDB URL), without SLURM: the same code
paths the SLURM array runs (tests/test_search_slurm.py submits them for real); and the
study's bookkeeping of interrupted and failed trials (SIGTERM, partial points, fixed points)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import REPO, overrides, run, run_together
from mariadb_server import mariadb  # noqa: F401  (a fixture)


def load_sqlite(db: Path):
    import optuna

    url = f"sqlite:///{db}"
    (summary,) = optuna.get_all_study_summaries(url)
    return optuna.load_study(study_name=summary.study_name, storage=url)


def load(storage: Path | str):
    """The study in a journal file, or in a database (an RDB URL)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    st = storage if isinstance(storage, str) else JournalStorage(JournalFileBackend(str(storage)))
    (summary,) = optuna.get_all_study_summaries(st)
    return optuna.load_study(study_name=summary.study_name, storage=st)


def worker_cmd(tiny, run_dir, storage, n, worker, extra=()):
    return [
        sys.executable,
        "-m",
        "dots.search",
        *overrides(
            tiny,
            run_dir,
            trials=n,
            extra=[
                f"search.storage='{storage}'",  # quoted: an RDB URL holds '=' (Hydra's grammar)
                "search.workers=2",
                f"search.worker={worker}",
                "search.heartbeat_s=0.5",
                "search.grace_s=4",
                # every sample drawn: adaptive sampling's shorter trials let one worker finish the study
                # before the other's engine is up, and these tests are about sharing it
                "search.adaptive.enabled=false",
                *extra,
            ],
        ),
    ]


@pytest.fixture(params=["journal", "mariadb"])
def shared_storage(request, tmp_path):
    """Where the workers' study lives: a journal file, or a database on a real MariaDB server
    (tests/mariadb_server.py, started as the SLURM scripts start theirs)."""
    if request.param == "journal":
        return tmp_path / "study.journal"
    return request.getfixturevalue("mariadb").url()


@pytest.mark.timeout(900)
def test_two_workers_share_one_study(tiny, tmp_path, shared_storage):
    """Two worker processes extend one study to n trials: each scores trials of its own, none
    twice, and one exports. The shared stages (selection, τ̃) and a first trial are made
    beforehand, so that both workers start on equal terms (else the one that built the stages
    has its engine running first and may score every trial before the other starts)."""
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", shared_storage, 6
    run(worker_cmd(tiny, run_dir, storage, 1, 0)[3:] + ["export.enabled=false"])
    outs = run_together([worker_cmd(tiny, run_dir, storage, n, w) for w in (0, 1)])
    study = load(storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n
    params = [tuple(sorted(t.params.items())) for t in complete]
    assert len(set(params)) == n  # no duplicate coefficients
    # both workers scored trials, each its own, together every trial after the first; one exported
    scored = [{int(number) for number in re.findall(r"\btrial (\d+): .*→ C=", o)} for o in outs]
    assert all(scored) and not scored[0] & scored[1], (scored, outs)
    assert scored[0] | scored[1] == {t.number for t in complete} - {0}, scored
    assert sum(any(line.startswith("export: ") for line in o.splitlines()) for o in outs) == 1
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["complete_trials"] == n


@pytest.mark.timeout(900)
def test_dead_workers_trial_is_recovered(tiny, tmp_path, shared_storage):
    """Worker 1 is killed while it runs a trial; worker 0 takes that trial over."""
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", shared_storage, 5
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    # worker 1 alone builds the shared stages and starts the trials; it is frozen inside one, then killed
    slow = subprocess.Popen(
        worker_cmd(tiny, run_dir, storage, n, 1),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    victim, study = None, None
    while time.time() < deadline and victim is None and slow.poll() is None:
        time.sleep(0.02)
        try:  # the study loaded once it exists, then one query per poll: a short trial is not missed
            study = study or (load(storage) if isinstance(storage, str) or storage.exists() else None)
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if study else []
        except Exception:
            continue
        # a trial whose coefficients are all chosen (one killed between two suggestions
        # evaluated nothing and is not retried: test_partial_point_is_not_retried)
        seen = next((t.number for t in running if len(t.params) == 2), None)
        if seen is None:
            continue
        slow.send_signal(signal.SIGSTOP)  # frozen: the trial cannot finish between this look and the kill
        try:
            state = next(t.state for t in study.get_trials(deepcopy=False) if t.number == seen)
        except Exception:
            state = None
        if state == TrialState.RUNNING:
            victim = seen
        else:  # it finished before the worker stopped (or the look failed): go on and look again
            slow.send_signal(signal.SIGCONT)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    assert victim is not None, "worker 1 never started a trial"
    survivor = subprocess.run(
        worker_cmd(tiny, run_dir, storage, n, 0), cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert survivor.returncode == 0, survivor.stdout + survivor.stderr
    study = load(storage)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[victim].state == TrialState.FAIL
    retried = [t for t in trials.values() if t.user_attrs.get("dots_retry_of") == victim]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == trials[victim].params
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == n


def test_workers_opening_an_empty_database_together_all_get_the_study(mariadb):
    """Four processes open one empty MariaDB database at once: Optuna's tables are created by one,
    the others retry past "already exists" or a duplicate key, and all load the same study."""
    url = mariadb.url()
    code = (
        "import sys, optuna; from pathlib import Path; from dots.search.study.storage import open_storage\n"
        "st = open_storage(sys.argv[1], Path('.'))\n"
        "optuna.create_study(study_name='s', storage=st, load_if_exists=True, directions=['maximize'] * 2)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-1500:] for _, err in outs]
    import optuna

    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["s"]  # one study, loaded by all


# --- the bookkeeping, on an in-memory study (no engine) --------------------------------------


def _study():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(directions=["maximize", "minimize"])


def test_sigterm_deferred_holds_the_exit_until_the_block_ends():
    from dots.runtime.signals import SIGTERM_EXIT_CODE, exit_on_sigterm, sigterm_deferred

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert exit_on_sigterm()
        reached = []
        with pytest.raises(SystemExit) as exit_info:
            with sigterm_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                reached.append("after the signal")  # the block finishes its bookkeeping
            reached.append("after the block")  # never: the exit lands at the block's end
        assert exit_info.value.code == SIGTERM_EXIT_CODE and reached == ["after the signal"]
        with pytest.raises(SystemExit):  # outside a deferred block it lands at once
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_partial_point_is_not_retried():
    """A trial cut off between two suggestions evaluated nothing: it fails and nothing is queued
    (re-queuing half a point would give a retry with different coefficients). A whole point, or
    an enqueued one however far its suggestions got, is queued again as it was."""
    from optuna.trial import TrialState

    from dots.search.study.workers import RETRY_OF, fail_and_requeue

    names = ["lambda_a", "lambda_b"]
    study = _study()
    partial = study.ask()
    partial.suggest_float("lambda_a", 0, 1)
    whole = study.ask()
    point = {n: whole.suggest_float(n, 0, 1) for n in names}
    study.enqueue_trial({"lambda_a": 0.25, "lambda_b": 0.75})
    fixed = study.ask()
    fixed.suggest_float("lambda_a", 0, 1)
    for trial in (partial, whole, fixed):
        assert fail_and_requeue(study, trial._trial_id, names)
    assert not fail_and_requeue(study, whole._trial_id, names)  # already failed: nothing twice
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert {t.user_attrs[RETRY_OF]: t.system_attrs["fixed_params"] for t in waiting} == {
        whole.number: point,
        fixed.number: {"lambda_a": 0.25, "lambda_b": 0.75},
    }


def test_fixed_point_that_failed_is_scored_on_rerun(tiny, tmp_path, monkeypatch):
    """A fixed point whose trial failed (an error, not an interruption) is enqueued again by the
    next run; Optuna's skip_if_exists would match the failed trial and lose the point, replacing
    it by a TPE sample. The real search on the tiny family; the scorer's second call raises."""
    from optuna.trial import TrialState

    from dots.search.study.scorer import Scorer

    points = [[0.6, 0.7], [0.8, 0.9], [1.0, 1.1]]
    real_score, calls = Scorer.__call__, []

    def out_of_memory_once(self, coefficients, seed):
        calls.append(dict(coefficients))
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (injected)")
        return real_score(self, coefficients, seed)

    monkeypatch.setattr(Scorer, "__call__", out_of_memory_once)
    fixed = "[" + ",".join(f"[{a},{b}]" for a, b in points) + "]"
    ovr = overrides(tiny, tmp_path / "run", extra=[f"search.fixed={fixed}", "export.enabled=false"])
    with pytest.raises(RuntimeError, match="out of memory"):
        run(ovr)
    run_dir = run(ovr)
    study = load_sqlite(run_dir / "study.db")
    failed = study.get_trials(states=(TrialState.FAIL,))
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert [tuple(t.params.values()) for t in failed] == [tuple(points[1])]
    assert sorted(tuple(t.params.values()) for t in complete) == [tuple(p) for p in points]
    scored = [(c["sft"], c["rlvr"]) for c in calls]  # the rerun scores the failed point and the last
    assert scored[:2] == [tuple(p) for p in points[:2]] and sorted(scored[2:]) == [tuple(p) for p in points[1:]]
    assert all(0 <= t.values[0] <= 1 and t.values[1] > 1 for t in complete)  # scored: consistency, perplexity
