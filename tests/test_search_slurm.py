"""`python -m dots.search -m hydra/launcher=slurm_local ...` as real jobs on a SLURM cluster.

A sweep becomes one job array; several workers of one study are array tasks sharing a
journal file (or a MariaDB database); a worker cancelled with `scancel` mid-trial loses nothing (its trial is
failed and retried by the other worker). Runs on the tiny generated family `tiny` of
tests/conftest.py with the search overrides of tests/helpers.py, and
conf/hydra/launcher/slurm_local.yaml (slurm.yaml sized for a CPU node: 1 CPU each).

Needs a running cluster (scripts/slurm/start.sh); skipped without one unless CI is set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from conftest_slurm import SlurmCluster, sacct_final_states, slurm_cluster  # noqa: F401  (fixture)
from helpers import REPO, overrides
from mariadb_server import mariadb  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SWEEP_TIMEOUT_S = 900  # the whole multirun command, on a loaded 2-core machine
TRIAL_LINE = re.compile(r"^trial (\d+): ", re.MULTILINE)
# Longer trials than test_search's defaults, so that a worker is almost always inside a
# trial (and two workers overlap): 8 samples of up to 16 tokens per query.
SLOWER_TRIALS = ("search.k=8", "search.max_tokens=16")


# --- helpers --------------------------------------------------------------------------------


def multirun_cmd(cluster: SlurmCluster, sweep_dir: Path, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dots.search",
        "-m",
        "hydra/launcher=slurm_local",
        f"hydra.launcher.partition={cluster.partition}",
        f"hydra.sweep.dir={sweep_dir}",
        *args,
    ]


def array_tasks(sweep_dir: Path) -> list[str]:
    """The SLURM ids of the jobs the launcher submitted for this sweep: `<array>_<task>`, or
    `<job>` when a multirun has a single job (submitit submits no array then)."""
    folder = sweep_dir / ".submitit"
    if not folder.is_dir():
        return []
    names = [p.name for p in folder.iterdir()]
    tasks = sorted(n for n in names if re.fullmatch(r"\d+_\d+", n))
    return tasks or sorted(n for n in names if n.isdigit())


def job_log(sweep_dir: Path, task: str) -> str:
    path = sweep_dir / ".submitit" / task / f"{task}_0_log.out"
    return path.read_text() if path.exists() else ""


def start_multirun(
    cluster: SlurmCluster, sweep_dir: Path, args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.Popen:
    """The multirun command started in `cwd`, its output (stderr too) read back as text by `finish`."""
    return subprocess.Popen(
        multirun_cmd(cluster, sweep_dir, args),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen, sweep_dir: Path, timeout_s: float = SWEEP_TIMEOUT_S) -> str:
    """Wait for the multirun command; on timeout cancel its jobs and fail with its output."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"multirun not done after {timeout_s:.0f}s; jobs {array_tasks(sweep_dir)}\n{out[-3000:]}")
    return out


@pytest.fixture
def sweep_dir(tmp_path):
    """A fresh Hydra sweep dir (and with it a fresh submitit folder); leftover jobs are cancelled."""
    path = tmp_path / "multirun"
    yield path
    arrays = {t.split("_")[0] for t in array_tasks(path)}
    if arrays:
        subprocess.run(["scancel", *sorted(arrays)], capture_output=True, timeout=30)


@pytest.fixture
def env(tmp_path):
    """The jobs import dots (and its conf/) from this checkout, whatever else is installed."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(tmp_path / "outputs")}


def load_study(storage: Path | str):
    """The one study in a journal file or a database (an RDB URL), or None while no worker has
    created it yet."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if isinstance(storage, Path) and not storage.exists():
        return None
    backend = storage if isinstance(storage, str) else JournalStorage(JournalFileBackend(str(storage)))
    summaries = optuna.get_all_study_summaries(backend)
    if not summaries:
        return None
    return optuna.load_study(study_name=summaries[0].study_name, storage=backend)


def wait_for_study(
    proc: subprocess.Popen, storage: Path, ready: Callable[[Any], bool], what: str, poll_s: float = 0.2
) -> None:
    """Poll the journal study until `ready(study)`; fail with `what` and the command's output
    when the command ends or SWEEP_TIMEOUT_S passes first."""
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(poll_s)
        try:
            study = load_study(storage)
        except Exception:  # a journal line being written
            continue
        if study is not None and ready(study):
            return
    proc.kill()
    pytest.fail(f"{what}\n{proc.communicate()[0][-3000:]}")


def worker_args(
    tiny,
    run_dir: Path,
    storage: Path | str,
    n: int,
    heartbeat_s: float,
    grace_s: float,
    trial_work: tuple[str, ...] = SLOWER_TRIALS,
) -> list[str]:
    return overrides(
        tiny,
        run_dir,
        trials=n,
        extra=[
            *trial_work,
            "search.workers=2",
            "search.worker=range(2)",
            f"search.storage='{storage}'",  # quoted: an RDB URL holds '=' (Hydra's grammar)
            f"search.heartbeat_s={heartbeat_s}",
            f"search.grace_s={grace_s}",
        ],
    )


# --- tests ----------------------------------------------------------------------------------


def test_density_sweep_runs_two_searches_as_one_job_array(tiny, slurm_cluster, sweep_dir, env, tmp_path):
    from dots.io.checkpoint import Checkpoint

    args = overrides(tiny, "null", trials=2, extra=["sparsify.density=0.3,0.5"])  # run dirs under DOTS_OUTPUTS
    proc = start_multirun(slurm_cluster, sweep_dir, args, env, tmp_path)
    out = finish(proc, sweep_dir)
    assert proc.returncode == 0, out[-3000:]

    tasks = array_tasks(sweep_dir)
    assert len(tasks) == 2 and len({t.split("_")[0] for t in tasks}) == 1, tasks  # one array, two tasks
    assert sacct_final_states(tasks) == dict.fromkeys(tasks, "COMPLETED")
    run_dirs = sorted((tmp_path / "outputs" / "search").iterdir())
    assert len(run_dirs) == 2, run_dirs
    densities = set()
    base_names = Checkpoint(tiny[1]).names
    for run_dir in run_dirs:
        densities.add(yaml.safe_load((run_dir / "config.yaml").read_text())["sparsify"]["density"])
        result = yaml.safe_load((run_dir / "result.yaml").read_text())
        assert result["complete_trials"] == 2 and set(result["coefficients"]) == {"sft", "rlvr"}
        assert set(Checkpoint(run_dir / "model").names) == set(base_names)
    assert densities == {0.3, 0.5}


@pytest.mark.parametrize("kind", ["journal", "mariadb"])
def test_two_workers_share_one_study_as_array_tasks(tiny, slurm_cluster, sweep_dir, env, tmp_path, kind, request):
    """The array's two tasks extend one study, on a journal file or a MariaDB database."""
    from optuna.trial import TrialState

    storage = tmp_path / "study.journal" if kind == "journal" else request.getfixturevalue("mariadb").url()
    run_dir, n = tmp_path / "run", 6
    args = worker_args(tiny, run_dir, storage, n, heartbeat_s=1, grace_s=60)
    proc = start_multirun(slurm_cluster, sweep_dir, args, env, tmp_path)
    out = finish(proc, sweep_dir)
    assert proc.returncode == 0, out[-3000:]

    tasks = array_tasks(sweep_dir)
    assert len(tasks) == 2 and sacct_final_states(tasks) == dict.fromkeys(tasks, "COMPLETED")
    study = load_study(storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n
    assert len({tuple(sorted(t.params.items())) for t in complete}) == n  # no point evaluated twice
    assert not study.get_trials(states=(TrialState.FAIL, TrialState.RUNNING))
    logs = {t: job_log(sweep_dir, t) for t in tasks}
    assert all(f"run directory: {run_dir}" in log for log in logs.values()), logs
    # each complete trial was run (and logged) by exactly one of the two workers
    logged = [int(m) for log in logs.values() for m in TRIAL_LINE.findall(log)]
    assert sorted(logged) == sorted(t.number for t in complete), logs
    # pick and export under one lock: exactly one worker exports, the other finds it done
    exports = [line for log in logs.values() for line in log.splitlines() if line.startswith("export: ")]
    assert sum("up to date" not in line for line in exports) == 1, exports
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["complete_trials"] == n
    assert (run_dir / "model" / "README.md").exists()


def frozen_trial(storage: Path, window_s: float) -> int | None:
    """With one worker suspended: its RUNNING trial, i.e. one whose heartbeat stays still for
    window_s (the other worker's heartbeat moves, or its trial completes), or that the other
    worker already failed as stale. None when the suspended worker is between trials."""
    from optuna.trial import TrialState

    from dots.search.study.workers import HEARTBEAT

    before = {
        t.number: t.system_attrs.get(HEARTBEAT) for t in load_study(storage).get_trials(states=(TrialState.RUNNING,))
    }
    time.sleep(window_s)
    after = {t.number: t for t in load_study(storage).get_trials()}
    still = [
        n
        for n, beat in before.items()
        if after[n].state == TrialState.FAIL
        or (after[n].state == TrialState.RUNNING and after[n].system_attrs.get(HEARTBEAT) == beat)
    ]
    return still[0] if len(still) == 1 else None


def test_cancelled_workers_trial_is_retried_by_the_other(tiny, slurm_cluster, sweep_dir, env, tmp_path):
    """One array task is cancelled (`scancel --signal=KILL`) in the middle of a trial: that trial
    stays RUNNING without heartbeat, the other worker marks it FAIL after grace_s and runs its
    coefficients again, and the study still ends with exactly n complete trials.

    (A plain `scancel` sends SIGTERM, which submitit ignores, and kills KillWait seconds later:
    short trials could all finish in between. To kill the worker inside a trial, the job is
    first suspended and its frozen trial identified; if it froze between trials it resumes.)"""
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", tmp_path / "study.journal", 8
    args = worker_args(
        tiny,
        run_dir,
        storage,
        n,
        heartbeat_s=0.5,
        grace_s=6,
        trial_work=("search.k=64", "search.max_tokens=64", "search.adaptive.enabled=false"),
    )  # ~1 s trials, idle machine (every one of the 64 samples drawn)
    proc = start_multirun(slurm_cluster, sweep_dir, args, env, tmp_path)

    def complete_count() -> int:
        return len(load_study(storage).get_trials(states=(TrialState.COMPLETE,)))

    # Wait until two trials run at once: both workers are inside the study loop.
    wait_for_study(
        proc,
        storage,
        lambda study: len(study.get_trials(states=(TrialState.RUNNING,))) >= 2,
        "the two workers never ran trials at the same time",
    )
    tasks = array_tasks(sweep_dir)
    victim_task, survivor_task = tasks[1], tasks[0]
    victim = None
    while victim is None:
        if complete_count() >= n - 1:
            proc.kill()
            pytest.fail("the study ended before the worker could be caught inside a trial")
        subprocess.run(["scontrol", "suspend", victim_task], check=True, capture_output=True, timeout=30)
        time.sleep(0.3)
        victim = frozen_trial(storage, window_s=3.0)
        if victim is None:
            subprocess.run(["scontrol", "resume", victim_task], check=True, capture_output=True, timeout=30)
            time.sleep(0.7)
    subprocess.run(["scancel", "--signal=KILL", victim_task], check=True, timeout=30)
    assert sacct_final_states([victim_task], timeout_s=120)[victim_task].startswith("CANCELLED")

    finish(proc, sweep_dir)  # exits non-zero: one of its jobs was cancelled
    assert sacct_final_states([survivor_task])[survivor_task] == "COMPLETED", job_log(sweep_dir, survivor_task)
    study = load_study(storage)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[victim].state == TrialState.FAIL
    assert [t.number for t in trials.values() if t.state == TrialState.FAIL] == [victim]
    retries = [t for t in trials.values() if t.user_attrs.get("dots_retry_of") == victim]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == trials[victim].params
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n and len({tuple(sorted(t.params.items())) for t in complete}) == n
    assert f"trial(s) [{victim}] left running by a dead worker" in job_log(sweep_dir, survivor_task)
    assert f"trial {retries[0].number}: " in job_log(sweep_dir, survivor_task)  # the survivor ran the retry
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["complete_trials"] == n


def test_plain_scancel_stops_the_worker_through_its_sigterm_handler(tiny, slurm_cluster, sweep_dir, env, tmp_path):
    """A plain `scancel` (SIGTERM, then SIGKILL KillWait seconds later) in the middle of a study:
    submitit alone would ignore the SIGTERM and leave its trial RUNNING when the SIGKILL comes;
    dots.search's handler stops the worker at once instead — it logs the stop, fails the
    interrupted trial and queues its coefficients again, so no trial is left RUNNING — and
    the same command rerun (here without SLURM) ends the study with exactly n complete trials."""
    from optuna.trial import TrialState

    run_dir, storage, n = tmp_path / "run", tmp_path / "study.journal", 8
    args = overrides(
        tiny,
        run_dir,
        trials=n,
        extra=["search.k=64", "search.max_tokens=64", "search.adaptive.enabled=false", f"search.storage={storage}"],
    )  # long trials: all 64 samples of each query drawn
    proc = start_multirun(slurm_cluster, sweep_dir, args, env, tmp_path)

    def mid_study(study) -> bool:
        complete = study.get_trials(states=(TrialState.COMPLETE,))
        return 2 <= len(complete) < n - 1 and bool(study.get_trials(states=(TrialState.RUNNING,)))

    wait_for_study(proc, storage, mid_study, "no trial was running after two complete ones", poll_s=0.1)
    (task,) = array_tasks(sweep_dir)
    subprocess.run(["scancel", task], check=True, timeout=30)
    assert sacct_final_states([task], timeout_s=120)[task].startswith("CANCELLED")
    finish(proc, sweep_dir)  # exits non-zero: its job was cancelled

    log = job_log(sweep_dir, task)
    assert "SIGTERM: stopping" in log, log[-3000:]
    study = load_study(storage)
    assert not study.get_trials(states=(TrialState.RUNNING,))  # what a SIGKILL mid-trial would leave
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) <= 1  # the trial the signal interrupted, if it landed inside one
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs.get("dots_retry_of") for t in queued] == [t.number for t in failed]
    done = len(study.get_trials(states=(TrialState.COMPLETE,)))
    assert 2 <= done < n

    rerun = subprocess.run(
        [sys.executable, "-m", "dots.search", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    study = load_study(storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n
    for trial in failed:  # the interrupted point was evaluated again, at the same coefficients
        retry = [t for t in complete if t.user_attrs.get("dots_retry_of") == trial.number]
        assert len(retry) == 1 and retry[0].params == trial.params
