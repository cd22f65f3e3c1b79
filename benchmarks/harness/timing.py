"""Timing: medians of timed runs after untimed warm-ups, and a command's wall time and peak RSS
as GNU `time -v` (Debian package `time`) reports them."""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any, Callable, Sequence

TIME = "/usr/bin/time"


def require_time() -> None:
    """Stop with a one-line message when GNU time is missing."""
    if not Path(TIME).exists():
        raise SystemExit(f"{TIME} is missing: apt-get install time")


def parse_time_v(text: str) -> tuple[float, float]:
    """(wall seconds, peak RSS in GiB) from GNU time -v output."""
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if rss is None or wall is None:
        raise ValueError("no GNU time -v report in the output")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds, int(rss.group(1)) / 2**20


def seconds(call: Callable[[], object], device: Any = None) -> float:
    """Seconds of one call, from `device` idle to its work done (`dots.runtime.timing.DeviceTimer`:
    on CUDA it synchronizes at both ends; None or the CPU: the host clock alone)."""
    from dots.runtime.timing import DeviceTimer

    with DeviceTimer(device) as timer:
        call()
    return timer.seconds


def swap_seconds(engine: Any, coefficients: dict[str, float]) -> float:
    """Seconds of `engine.swap_coefficients(coefficients)` until the engine's device has finished it."""
    from dots.runtime.timing import device_of

    return seconds(lambda: engine.swap_coefficients(coefficients), device_of(engine))


def timed_each(
    call: Callable[[Any], object], items: Sequence[Any], warmup: Sequence[Any] = (), device: Any = None
) -> list[float]:
    """Seconds of `call(item)` on `device` (see `seconds`) for each item, after an untimed `call(w)`
    for each of `warmup` (first touches of fresh buffers, the file cache: paid once per run, not per call)."""
    for item in warmup:
        call(item)
    return [seconds(lambda item=item: call(item), device) for item in items]


def median_or(values: Sequence[float], fmt: str = "{:.3f}", empty: str = "—") -> str:
    """The median of `values` formatted, or `empty` when there are none."""
    return fmt.format(statistics.median(values)) if values else empty


def time_command(cmd: list[str], env: dict[str, str], cwd: Path, what: str) -> tuple[float, float]:
    """(wall seconds, peak RSS in GiB) of `cmd` run under GNU time -v; stops when it fails."""
    proc = subprocess.run([TIME, "-v", *cmd], capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return parse_time_v(proc.stderr)


def timed_runs(
    cmd: list[str],
    out: Path,
    runs: int,
    env: dict[str, str],
    cwd: Path,
    what: str,
    after: Callable[[Path], None] | None = None,
) -> list[tuple[float, float]]:
    """`runs` runs of `cmd` under GNU time, each printed: [(wall s, peak RSS GiB)]; what the command
    wrote to `out` is read by `after` (when given) and removed after each run."""
    results = []
    for i in range(runs):
        wall, rss = time_command(cmd, env, cwd, what)
        print(f"  run {i + 1}: wall {wall:.1f} s, peak RSS {rss:.3f} GiB", flush=True)
        results.append((wall, rss))
        if after is not None:
            after(out)
        shutil.rmtree(out, ignore_errors=True)
    return results


def per_size(
    sizes: Sequence[float],
    root: Path,
    run_size: Callable[[float, Path], tuple[Any, list[tuple[float, float]]]],
    keep: bool = False,
) -> list[tuple[float, Any, float, float, float, float]]:
    """`run_size(size, root/<size>gb)` for each size — it generates what it measures there and
    returns (facts, [(wall s, peak RSS GiB) per run]) — as rows (size, facts, median wall,
    median RSS, min RSS, max RSS); the generated files are deleted as it goes unless `keep`."""
    rows = []
    try:
        for size in sizes:
            where = root / f"{size:g}gb"
            facts, runs = run_size(size, where)
            walls, rss = [r[0] for r in runs], [r[1] for r in runs]
            rows.append((size, facts, statistics.median(walls), statistics.median(rss), min(rss), max(rss)))
            if not keep:
                shutil.rmtree(where, ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def sizes_parser(
    doc: str, sizes: list[float], runs: int, root: str, machine: str, question: str
) -> argparse.ArgumentParser:
    """The options of a measurement over trio sizes (GB each): --sizes, --runs, --root, and --record
    (into benchmarks/results/<question>.md) with the --machine and --date it names."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=sizes, help="checkpoint sizes in GB (each)")
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--root", type=Path, default=Path(root))
    parser.add_argument("--record", action="store_true", help=f"append the results to benchmarks/results/{question}.md")
    parser.add_argument("--machine", default=machine)
    parser.add_argument("--date", default=None)
    return parser
