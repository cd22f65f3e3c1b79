"""Fixtures for tests that run real jobs on a SLURM cluster.

The cluster is the one-node cluster of scripts/slurm/start.sh (or any cluster whose
`sinfo` answers). Without one the tests are skipped, except when the environment
variable CI is set: there a missing cluster fails them, so CI cannot pass silently
without running them. Use from a test module with
`from conftest_slurm import slurm_cluster, slurm_executor, wait_until_done`
(the import makes the fixtures visible to that module).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import unavailable

USABLE_NODE_STATES = {"idle", "mixed", "allocated", "completing"}
JOB_TIMEOUT_MIN = 5


@dataclass(frozen=True)
class SlurmCluster:
    """The partition tests submit to, and its first node."""

    partition: str
    node: str
    cpus: int


def _unavailable(reason: str) -> None:
    """Skip the test, or fail it when running in CI (`helpers.unavailable`)."""
    unavailable(f"{reason}; start one with `sudo bash scripts/slurm/start.sh`")


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def sacct_states(job_id: str) -> dict[str, str]:
    """Job id -> state, as the accounting database reports them (steps left out)."""
    out = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", job_id]).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


UNFINISHED_STATES = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED")


def sacct_final_states(job_ids: list[str], timeout_s: float = 30.0) -> dict[str, str]:
    """The final accounting state of each job id (e.g. "12" or "12_0").

    Accounting reaches slurmdbd shortly after a job ends, so this polls until every
    id has a finished state, and fails after timeout_s.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        states: dict[str, str] = {}
        for array_or_job in {j.split("_")[0] for j in job_ids}:
            states.update(sacct_states(array_or_job))
        final = {j: states.get(j, "") for j in job_ids}
        if all(s and not s.startswith(UNFINISHED_STATES) for s in final.values()):
            return final
        if time.monotonic() > deadline:
            pytest.fail(f"sacct has no final state for {job_ids} after {timeout_s:.0f}s: {final}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """A usable SLURM cluster with accounting (submitit polls `sacct`)."""
    if shutil.which("sinfo") is None:
        _unavailable("no SLURM cluster: `sinfo` is not installed")
    try:
        import submitit  # noqa: F401
    except ImportError:
        _unavailable("submitit is not installed (pip install -e .[slurm])")
    info = _run(["sinfo", "-h", "-o", "%P|%n|%c|%T"])
    if info.returncode != 0:
        _unavailable(f"`sinfo` fails: {info.stderr.strip()}")
    rows = [line.split("|") for line in info.stdout.splitlines() if line.count("|") == 3]
    usable = [r for r in rows if r[3].rstrip("*~#$@+") in USABLE_NODE_STATES]
    if not usable:
        _unavailable(f"no usable SLURM node: {info.stdout.strip()!r}")
    default = [r for r in usable if r[0].endswith("*")]
    partition, node, cpus, _ = (default or usable)[0]
    if _run(["sacct", "-n", "-X"]).returncode != 0:
        _unavailable("`sacct` fails: the cluster has no accounting (slurmdbd), which submitit needs")
    return SlurmCluster(partition=partition.rstrip("*"), node=node, cpus=int(cpus))


@pytest.fixture
def slurm_executor(slurm_cluster: SlurmCluster, tmp_path: Path):
    """A submitit executor on the cluster's partition, writing into a fresh folder."""
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path / "submitit" / "%j", cluster="slurm")
    executor.update_parameters(slurm_partition=slurm_cluster.partition, timeout_min=JOB_TIMEOUT_MIN, cpus_per_task=1)
    return executor


def wait_until_done(job, timeout_s: float = 120.0) -> None:
    """Poll a submitit job until it is finished; cancel it and fail after timeout_s.

    (submitit's own `result()` waits without a limit, and its state cache asks `sacct`
    ever more rarely; here every poll asks it.)
    """
    deadline = time.monotonic() + timeout_s
    while not job.done(force_check=True):
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"SLURM job {job.job_id} not done after {timeout_s:.0f}s (state {job.state})")
        time.sleep(0.5)


def wait_until_state(job, state: str, timeout_s: float = 60.0) -> None:
    """Poll a submitit job until `sacct` reports `state`; cancel it and fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while job.watcher.get_state(job.job_id, mode="force") != state:
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"SLURM job {job.job_id} never {state} in {timeout_s:.0f}s (state {job.state})")
        time.sleep(0.5)
