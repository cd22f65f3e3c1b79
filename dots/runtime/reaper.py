"""Engine processes end with the process that owns them, however it dies.

vLLM runs its engine core and workers in processes of their own. A clean exit (and
SIGTERM, `dots.runtime.signals`) closes them, but after `kill -9`, an OOM kill or a crash of the
owner they were re-parented to init and kept running, holding memory and GPUs. Before
an engine starts, `start_reaper` launches one small watcher per owner process
(`python -m dots.runtime.reaper PID`, in a session of its own so Ctrl-C and job signals
reach the owner, not it). While the owner lives, the watcher records the owner's
descendants every `INTERVAL_S`; when the owner is gone it ends every recorded process
still running, and their descendants (SIGTERM, then SIGKILL after `GRACE_S`), and exits.
Processes are told apart by pid and start time, so a reused pid is never touched. Linux
(/proc) only; elsewhere nothing is started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["descendants", "process_stat", "start_reaper", "still_running"]

INTERVAL_S = 1.0
GRACE_S = 3.0  # vLLM's engine core outlived SIGTERM in tests: do not wait long for it

_started: dict[int, subprocess.Popen] = {}  # owner pid → its watcher


def process_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return int(fields[1]), fields[0], int(fields[19])


def still_running(pid: int, start: int) -> bool:
    """Whether the process `pid` that started at `start` runs (a reused pid, a zombie or a gone one does not)."""
    stat = process_stat(pid)
    return stat is not None and stat[2] == start and stat[1] not in ("Z", "X")


def _children() -> dict[int, list[int]]:
    """Parent pid → child pids, from one scan of /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = process_stat(int(entry))
            if stat is not None:
                tree.setdefault(stat[0], []).append(int(entry))
    return tree


def descendants(pids: list[int]) -> dict[int, int]:
    """Every descendant of `pids` (not `pids` themselves) → its start time."""
    tree = _children()
    found: dict[int, int] = {}
    todo = list(pids)
    while todo:
        for child in tree.get(todo.pop(), []):
            stat = process_stat(child)
            if child not in found and stat is not None:
                found[child] = stat[2]
                todo.append(child)
    return found


def _signal_all(processes: dict[int, int], sig: int) -> None:
    for pid, start in processes.items():
        if still_running(pid, start):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def watch(owner: int, interval: float = INTERVAL_S, grace: float = GRACE_S) -> int:
    """Record `owner`'s descendants until it is gone, then end those still running; the number ended."""
    me = os.getpid()
    stat = process_stat(owner)
    if stat is None:
        return 0
    owner_start = stat[2]
    seen: dict[int, int] = {}
    while still_running(owner, owner_start):
        seen.update(descendants([owner]))
        seen.pop(me, None)
        time.sleep(interval)
    # the owner is gone: its engine processes, and whatever they started since the last look
    living = {pid: start for pid, start in seen.items() if still_running(pid, start)}
    living.update(descendants(list(living)))
    living.pop(me, None)
    if not living:
        return 0
    _signal_all(living, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(still_running(p, s) for p, s in living.items()):
        time.sleep(0.1)
    _signal_all(living, signal.SIGKILL)
    return len(living)


def start_reaper() -> subprocess.Popen | None:
    """Start this process's watcher (once; None where there is no /proc)."""
    owner = os.getpid()
    if owner in _started and _started[owner].poll() is None:
        return _started[owner]
    if not Path(f"/proc/{owner}/stat").exists():
        return None
    from dots.paths import export_import_path

    export_import_path()  # the watcher imports dots like the engine's own processes do
    proc = subprocess.Popen(
        [sys.executable, "-m", "dots.runtime.reaper", str(owner)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C, SIGTERM to the job's group: the owner's to handle, not its watcher's
    )
    _started[owner] = proc
    return proc


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(0 if watch(int(sys.argv[1])) >= 0 else 1)
