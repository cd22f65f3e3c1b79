"""Peak memory and wall time of a streaming `ties` merge at two model sizes.

Generates (benchmarks/gen_checkpoints.py) a Qwen2-shaped float32 base + 2 sources of
each size, runs `python -m dots.merge method=ties ...` under `/usr/bin/time -v` (Debian
package `time`) `--runs` times per size, prints the medians and, with `--record`,
appends them to benchmarks/RESULTS.md. The target: the peak RSS at 4 GB within 1.3× of
the one at 1 GB (both have the same largest tensor, so a streaming merge should not
grow with depth). Generated checkpoints and outputs are deleted at the end.

    python benchmarks/merge_memory.py --sizes 1 4 --runs 5 --root /tmp/dots-bench --record
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIME = "/usr/bin/time"


def parse_time_v(text: str) -> tuple[float, float]:
    """(wall seconds, peak RSS in GiB) from GNU time -v output."""
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    seconds = 0.0
    for part in wall.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds, rss_kb / 2**20


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
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


def mem_available_gib() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


@dataclass
class Guarded:
    returncode: int
    stdout: str
    stderr: str
    peak_anon_gib: float  # largest sum of RssAnon over the command's processes seen by the guard
    stopped: str = ""  # why the guard killed it ("" when it did not)


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
                pids = _descendants(proc.pid)
                anon = sum(_status_kb(pid, "RssAnon") for pid in pids) / 2**20
                peak = max(peak, anon)
                why = ""
                if limit_gib is not None and anon > limit_gib:
                    why = f"stopped by the memory guard: anonymous RSS {anon:.1f} GiB > {limit_gib:g} GiB"
                elif min_available_gib is not None and mem_available_gib() < min_available_gib:
                    why = (
                        f"stopped by the memory guard: MemAvailable < {min_available_gib:g} GiB "
                        f"(its anonymous RSS {anon:.1f} GiB)"
                    )
                if why:
                    stopped = why
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


def report(lines: list[str], record: bool) -> None:
    """Print a Markdown section and, with `record`, append it to benchmarks/RESULTS.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        with open(REPO / "benchmarks" / "RESULTS.md", "a") as fh:
            fh.write(text)


def merge_command(root: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dots.merge",
        "method=ties",
        f"backbone.base={root / 'base'}",
        f"+backbone.sources.sft={root / 'sft'}",
        f"+backbone.sources.rlvr={root / 'rlvr'}",
        f"output={out}",
        "overwrite=true",
    ]


def measure(root: Path, runs: int) -> list[tuple[float, float]]:
    env = {**os.environ, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(root / "outputs")}
    results = []
    for i in range(runs):
        out = root / "merged"
        proc = subprocess.run(
            [TIME, "-v", *merge_command(root, out)], capture_output=True, text=True, env=env, cwd=root
        )
        if proc.returncode != 0:
            raise SystemExit(f"merge failed:\n{proc.stderr[-3000:]}")
        wall, rss = parse_time_v(proc.stderr)
        print(f"  run {i + 1}: wall {wall:.1f} s, peak RSS {rss:.2f} GiB", flush=True)
        results.append((wall, rss))
        shutil.rmtree(out, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1.0, 4.0], help="checkpoint sizes in GB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-bench"))
    parser.add_argument("--record", action="store_true", help="append the medians to benchmarks/RESULTS.md")
    parser.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    parser.add_argument("--machine", default="2 CPU cores, 24 GiB RAM (shared)")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    if not Path(TIME).exists():
        raise SystemExit(f"{TIME} is missing: apt-get install time")
    rows = []
    try:
        for size in args.sizes:
            root = args.root / f"{size:g}gb"
            print(f"generating {size:g} GB checkpoints under {root}", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "benchmarks" / "gen_checkpoints.py"),
                    "--size-gb",
                    str(size),
                    "--out",
                    str(root),
                ],
                check=True,
            )
            results = measure(root, args.runs)
            walls, rss = [r[0] for r in results], [r[1] for r in results]
            rows.append((size, statistics.median(walls), statistics.median(rss), min(rss), max(rss)))
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.root, ignore_errors=True)
    lines = [
        "| checkpoint size (each of base + 2 sources, fp32) | median wall (s) | median peak RSS (GiB) | RSS min–max |",
        "|---|---|---|---|",
    ]
    for size, wall, rss, lo, hi in rows:
        lines.append(f"| {size:g} GB | {wall:.1f} | {rss:.2f} | {lo:.2f}–{hi:.2f} |")
    ratio = rows[-1][2] / rows[0][2] if len(rows) > 1 else float("nan")
    print("\n".join(lines))
    print(f"peak RSS ratio {args.sizes[-1]:g} GB / {args.sizes[0]:g} GB: {ratio:.3f} (target <= 1.3)")
    if args.record:
        import datetime

        date = args.date or datetime.date.today().isoformat()
        sizes = " ".join(f"{s:g}" for s in args.sizes)
        text = [
            "",
            f"## Streaming merge memory (ties, K=2) — {date}",
            "",
            f"Command: `python benchmarks/merge_memory.py --sizes {sizes} --runs {args.runs} --record` "
            "(each run: `/usr/bin/time -v python -m dots.merge method=ties backbone.base=BASE "
            "+backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT overwrite=true`).",
            f"Machine: {args.machine}. Checkpoints: benchmarks/gen_checkpoints.py, Qwen2-0.5B-shaped float32, "
            "size set by depth (largest tensor = the 151936×896 embedding, 545 MB, at every size). "
            f"Medians of {args.runs} runs.",
            "",
            *lines,
            "",
            f"Peak RSS ratio {args.sizes[-1]:g} GB / {args.sizes[0]:g} GB: **{ratio:.3f}** (target ≤ 1.3). "
            "Bound (K+4)×largest fp32 tensor = 6 × 0.51 GiB = 3.04 GiB + interpreter/torch overhead.",
            "",
        ]
        with open(REPO / "benchmarks" / "RESULTS.md", "a") as fh:
            fh.write("\n".join(text))


if __name__ == "__main__":
    main()
