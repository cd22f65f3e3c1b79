"""Several worker processes on one study (journal storage), without SLURM: the same code
paths the SLURM array runs (tests/test_search_slurm.py submits them for real)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from test_search import REPO, overrides, tiny  # noqa: F401  (fixture)




def load(storage: Path):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    st = JournalStorage(JournalFileBackend(str(storage)))
    (summary,) = optuna.get_all_study_summaries(st)
    return optuna.load_study(study_name=summary.study_name, storage=st)


def worker_cmd(tiny, run_dir, storage, n, worker, extra=()):
    return [sys.executable, "-m", "dots.search", *overrides(
        tiny, run_dir, trials=n,
        extra=[f"search.storage={storage}", "search.workers=2", f"search.worker={worker}",
               "search.heartbeat_s=0.5", "search.grace_s=4", *extra])]


def test_two_workers_share_one_study(tiny, tmp_path):
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", tmp_path / "study.journal", 6
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    procs = [subprocess.Popen(worker_cmd(tiny, run_dir, storage, n, w), cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for w in (0, 1)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    study = load(storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n
    params = [tuple(sorted(t.params.items())) for t in complete]
    assert len(set(params)) == n  # no duplicate coefficients
    # both workers evaluated trials, and exactly one exported
    assert all("trial" in o or "study already has" in o for o in outs)
    assert sum("export: " in o and "up to date" not in o for o in outs) == 1
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["complete_trials"] == n


def test_dead_workers_trial_is_recovered(tiny, tmp_path):
    """Worker 1 is killed while it runs a trial; worker 0 takes that trial over."""
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", tmp_path / "study.journal", 5
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    # worker 0 first alone long enough to build the shared stages, then worker 1 joins
    slow = subprocess.Popen(worker_cmd(tiny, run_dir, storage, n, 1), cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    victim = None
    while time.time() < deadline and victim is None and slow.poll() is None:
        time.sleep(0.1)
        if storage.exists():
            try:
                running = load(storage).get_trials(states=(TrialState.RUNNING,))
            except Exception:
                continue
            # a trial whose coefficients are all chosen (killing between two suggestions
            # would leave a partial point, retried with the missing λ sampled afresh)
            victim = next((t.number for t in running if len(t.params) == 2), None)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    assert victim is not None, "worker 1 never started a trial"
    survivor = subprocess.run(worker_cmd(tiny, run_dir, storage, n, 0), cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
    assert survivor.returncode == 0, survivor.stdout + survivor.stderr
    study = load(storage)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[victim].state == TrialState.FAIL
    retried = [t for t in trials.values() if t.user_attrs.get("dots_retry_of") == victim]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].params == trials[victim].params
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == n
