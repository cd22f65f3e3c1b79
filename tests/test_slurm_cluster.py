"""Real jobs on a real SLURM cluster: submitit round trips, arrays, cancellation, and
the project's Hydra launcher config (conf/hydra/launcher/slurm.yaml).

Needs a running cluster (scripts/slurm/start.sh); skipped without one unless CI is set.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_slurm import (  # noqa: F401  (fixtures are used by name)
    SlurmCluster,
    sacct_final_states,
    slurm_cluster,
    slurm_executor,
    wait_until_done,
    wait_until_state,
)

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]


def test_submitted_function_returns_its_result_from_a_slurm_job(slurm_executor):
    # Defined inside the test so that cloudpickle ships the code itself to the job.
    def multiply_in_job(a: int, b: int) -> tuple[int, str | None]:
        import os

        return a * b, os.environ.get("SLURM_JOB_ID")

    job = slurm_executor.submit(multiply_in_job, 6, 7)
    wait_until_done(job)
    product, job_id_seen_by_job = job.result()
    assert product == 42
    assert job_id_seen_by_job == job.job_id  # it really ran as that SLURM job
    assert sacct_final_states([job.job_id]) == {job.job_id: "COMPLETED"}


def test_job_array_of_two_runs_each_task_with_its_own_input(slurm_executor):
    def square_in_array_task(x: int) -> tuple[int, str | None, str | None]:
        import os

        return x * x, os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")

    jobs = slurm_executor.map_array(square_in_array_task, [3, 4])
    assert len(jobs) == 2
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_0", f"{array_id}_1"]
    for job in jobs:
        wait_until_done(job)
    results = [j.result() for j in jobs]
    assert results == [(9, array_id, "0"), (16, array_id, "1")]


def test_job_cancelled_with_scancel_reports_cancelled(slurm_executor):
    import submitit

    def sleep_for_minutes() -> None:
        import time

        time.sleep(240)

    job = slurm_executor.submit(sleep_for_minutes)
    wait_until_state(job, "RUNNING")
    subprocess.run(["scancel", job.job_id], check=True, timeout=30)
    wait_until_done(job, timeout_s=60)
    assert job.state.startswith("CANCELLED")
    assert sacct_final_states([job.job_id])[job.job_id].startswith("CANCELLED")
    # No result was written: result() raises instead of waiting forever.
    with pytest.raises(submitit.core.utils.UncompletedJobError, match="CANCELLED"):
        job.result()


def test_hydra_multirun_with_the_project_slurm_launcher(slurm_cluster: SlurmCluster, tmp_path):
    """`-m hydra/launcher=slurm` sends each run of a sweep to SLURM as one array task,
    with the project's sbatch defaults (requeue, signal before the time limit)."""
    sweep_dir = tmp_path / "multirun"
    cmd = [
        sys.executable,
        str(REPO / "tests" / "slurm_app.py"),
        "-m",
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={slurm_cluster.partition}",
        # The defaults ask for a GPU node; this cluster has CPUs only.
        "hydra.launcher.gpus_per_node=null",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=5",
        f"hydra.sweep.dir={sweep_dir}",
        "x=2,3",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    records = [json.loads((sweep_dir / str(i) / "result.json").read_text()) for i in (0, 1)]
    assert [(r["x"], r["square"]) for r in records] == [(2, 4), (3, 9)]
    array_ids = {r["slurm_array_job_id"] for r in records}
    assert len(array_ids) == 1 and None not in array_ids  # one SLURM job array
    array_id = array_ids.pop()
    assert sorted(r["slurm_array_task_id"] for r in records) == ["0", "1"]
    task_ids = [f"{array_id}_0", f"{array_id}_1"]
    assert sacct_final_states(task_ids) == dict.fromkeys(task_ids, "COMPLETED")

    (script,) = (sweep_dir / ".submitit").rglob("*_submission.sh")
    sbatch = script.read_text()
    assert "#SBATCH --requeue" in sbatch
    assert "#SBATCH --signal=USR2@120" in sbatch
    assert "#SBATCH --array=0-1%2" in sbatch  # array_parallelism, capped at the 2 runs
