"""Process memory: /proc status fields (VmRSS, VmHWM, RssAnon), the machine's MemAvailable, and a
guard that runs a command and kills its processes before they push a shared machine into the
OOM killer."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path


def status_kb(pid: int | str, field: str) -> int:
    """A /proc/<pid>/status memory field in kB (0 when the process or field is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def proc_gib(pid: int | str, field: str) -> float:
    """A /proc/<pid>/status memory field (VmRSS, VmHWM) in GiB; NaN when it is missing."""
    kb = status_kb(pid, field)
    return kb / 2**20 if kb else float("nan")


def own_rss_gib() -> float:
    """This process's resident set size (VmRSS) in GiB."""
    return status_kb("self", "VmRSS") / 2**20


def reset_peak() -> None:
    """Start this process's VmHWM afresh (Linux ≥ 4.0: writing 5 to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def mem_available_gib() -> float:
    """The machine's MemAvailable in GiB (infinity when /proc/meminfo does not say)."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def descendants(root: int) -> list[int]:
    """Every live descendant of `root` (from /proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class Guarded:
    returncode: int
    stdout: str
    stderr: str
    peak_anon_gib: float  # largest sum of RssAnon over the command's processes seen by the guard
    stopped: str = ""  # why the guard killed it ("" when it did not)


def guard_reason(anon: float, limit_gib: float | None, min_available_gib: float | None) -> str:
    """Why the guard must stop a command whose processes hold `anon` GiB ("" when it need not)."""
    if limit_gib is not None and anon > limit_gib:
        return f"stopped by the memory guard: anonymous RSS {anon:.1f} GiB > {limit_gib:g} GiB"
    if min_available_gib is not None and mem_available_gib() < min_available_gib:
        return (
            f"stopped by the memory guard: MemAvailable < {min_available_gib:g} GiB (its anonymous RSS {anon:.1f} GiB)"
        )
    return ""


def run_guarded(
    cmd: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    limit_gib: float | None = None,
    min_available_gib: float | None = None,
    interval: float = 0.25,
) -> Guarded:
    """Run `cmd` (typically `/usr/bin/time -v ...`) while a watchdog sums the anonymous resident
    memory (RssAnon: what the kernel cannot drop, unlike mmapped file pages) of all its
    descendants every `interval` s, and SIGKILLs them — not `cmd` itself, so GNU time still
    reports — when that sum exceeds `limit_gib` or the machine's MemAvailable falls below
    `min_available_gib`: a measurement must never push a shared machine into the OOM killer."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd, text=True)
        peak, stopped = 0.0, ""
        done = threading.Event()

        def watch() -> None:
            nonlocal peak, stopped
            while not done.wait(interval):
                pids = descendants(proc.pid)
                anon = sum(status_kb(pid, "RssAnon") for pid in pids) / 2**20
                peak = max(peak, anon)
                stopped = guard_reason(anon, limit_gib, min_available_gib)
                if stopped:
                    for pid in reversed(pids):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        proc.wait()
        done.set()
        watcher.join()
        out.seek(0)
        err.seek(0)
        return Guarded(proc.returncode, out.read(), err.read(), peak, stopped)


def start_watchdog(min_available_gib: float) -> None:
    """End this process (exit code 3) if the machine's MemAvailable falls below the floor."""

    def watch() -> None:
        while True:
            time.sleep(0.25)
            if mem_available_gib() < min_available_gib:
                print(
                    f"stopped by the memory guard: MemAvailable < {min_available_gib:g} GiB "
                    f"(this process: {own_rss_gib():.1f} GiB)",
                    flush=True,
                )
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def time_guarded(
    cmd: list[str], env: dict[str, str], cwd: Path, limit_gib: float | None, min_available_gib: float | None
) -> tuple[Guarded, float, float]:
    """`cmd` under GNU time -v and the memory guard: (what the guard saw, wall seconds, peak RSS in
    GiB); the last two NaN when GNU time did not report (the command never started)."""
    from benchmarks.harness.timing import TIME, parse_time_v

    proc = run_guarded([TIME, "-v", *cmd], env=env, cwd=cwd, limit_gib=limit_gib, min_available_gib=min_available_gib)
    if "Maximum resident set size" not in proc.stderr:
        return proc, float("nan"), float("nan")
    return proc, *parse_time_v(proc.stderr)
