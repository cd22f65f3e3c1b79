"""Engine processes end with their owner however it dies (dots.runtime.reaper): after `kill -9` of the
owner, its recorded descendants — children and grandchildren — are ended within seconds.
The vLLM search itself: tests/test_search_vllm.py::test_vllm_search_logs_to_its_run_dir_and_kill_9_leaves_no_process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

OWNER = r"""
import subprocess, sys, time
from dots.runtime.reaper import start_reaper
start_reaper()
child = subprocess.Popen(["sleep", "300"])
# a grandchild, as vLLM's workers are children of its engine-core process
middle = subprocess.Popen(
    [sys.executable, "-c",
     "import subprocess, time; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)"],
    stdout=subprocess.PIPE, text=True)
grandchild = int(middle.stdout.readline())
print(child.pid, middle.pid, grandchild, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_kill_9_of_the_owner_ends_its_descendants():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(x) for x in owner.stdout.readline().split()]
    assert len(pids) == 3 and all(alive(p) for p in pids)
    time.sleep(2.5)  # the watcher records descendants every second
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    start = time.monotonic()
    while any(alive(p) for p in pids) and time.monotonic() - start < 30:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]
    assert time.monotonic() - start < 10
