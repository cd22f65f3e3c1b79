"""Engine processes end with their owner however it dies (dots.runtime.reaper): after `kill -9` of the
owner, its recorded descendants — children and grandchildren — are ended within seconds.
The vLLM search itself is tests/test_search_vllm.py (marked vllm, slow)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import alive, cli_env, start_time

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


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_kill_9_of_the_owner_ends_its_descendants():
    env = cli_env()
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=env)
    pids = {p: start_time(p) for p in map(int, owner.stdout.readline().split())}  # pid → its start time
    assert len(pids) == 3 and all(alive(p, s) for p, s in pids.items())
    time.sleep(2.5)  # the watcher records descendants every second
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    start = time.monotonic()
    while any(alive(p, s) for p, s in pids.items()) and time.monotonic() - start < 30:
        time.sleep(0.2)
    assert not any(alive(p, s) for p, s in pids.items()), [p for p, s in pids.items() if alive(p, s)]
