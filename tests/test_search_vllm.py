"""A `dots.search` with engine=vllm on the lab trio: vLLM's log lines go to <run dir>/vllm.log,
not the terminal; `kill -9` of the search leaves no process behind: vLLM's EngineCore /
Worker processes (and dots' watcher) end within 30 s (dots.runtime.reaper)."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import alive, cli_env, require_vllm

from dots.runtime.reaper import descendants

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def test_vllm_search_logs_to_its_run_dir_and_kill_9_leaves_no_process(tmp_path):
    require_vllm()
    run_dir = tmp_path / "run"
    env = cli_env(tmp_path / "outputs")
    cmd = [
        sys.executable,
        "-m",
        "dots.search",
        "engine=vllm",
        "engine.enforce_eager=true",
        f"run_dir={run_dir}",
        "selection.n=4",
        "selection.m=1",
        "search.k=1",
        "search.n_trials=50",
        "export.enabled=false",
    ]
    log = open(tmp_path / "search.log", "w")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)

    def trials() -> int:
        try:
            return sqlite3.connect(run_dir / "study.db").execute("select count(*) from trials").fetchone()[0]
        except sqlite3.Error:
            return 0

    deadline = time.time() + 500
    while trials() == 0 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert proc.poll() is None and trials() > 0, (tmp_path / "search.log").read_text()[-3000:]
    vllm_line = re.compile(r"^(DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d ")
    logged = [line for line in (run_dir / "vllm.log").read_text().splitlines() if vllm_line.match(line)]
    shown = [line for line in (tmp_path / "search.log").read_text().splitlines() if vllm_line.match(line)]
    assert len(logged) > 10 and not shown, shown
    assert f"vLLM's log: {run_dir / 'vllm.log'}" in (tmp_path / "search.log").read_text()
    processes = descendants([proc.pid])
    names = {pid: name(pid) for pid in processes}
    assert any("EngineCore" in n for n in names.values()), names
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    while any(alive(p, s) for p, s in processes.items()) and time.monotonic() - start < 30:
        time.sleep(0.2)
    left = {p: names[p] for p, s in processes.items() if alive(p, s)}
    print(
        f"\n{len(processes)} processes of the run ended {time.monotonic() - start:.1f} s after kill -9: "
        f"{sorted(set(names.values()))}"
    )
    assert not left, left
