"""How close `python -m dots.merge` comes to the machine's limit: bytes moved vs bandwidth.

A merge must read every input byte once and write every output byte once. This script
measures, on the machine it runs on, the bandwidths that bound that work and compares
the merge with the resulting floor:

- disk read, cold: the inputs read sequentially (16 MiB reads) right after dropping the
  page cache (`/proc/sys/vm/drop_caches`, needs root; otherwise reported as not measured);
- page-cache read: the same files read again;
- write: a new file of the output's size, buffered (no sync) and synced (`fdatasync`):
  the synced rate is what sustained writing settles to once the kernel's dirty-page limit
  throttles a writer;
- memory: `Tensor.copy_` of a 1 GiB float32 tensor into another (bytes read + written).

Floors: warm = inputs / page-cache read + output / buffered write; disk = max(inputs /
cold read, output / synced write) (reading and writing overlap); memory = (inputs +
output) / memory bandwidth. The merge is timed as a whole process (`/usr/bin/time`) and
in-process (`merge_checkpoints` alone, i.e. without the ~2 s of Python, torch and Hydra
start-up), warm and — when caches can be dropped — cold. Medians of `--runs`.

    python -m benchmarks.merge limits --root /tmp/dots-limits --shape qwen2.5-0.5b --runs 5 --record
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.harness.floors import GB, drop_caches, memory_gbps, read_seconds, write_seconds
from benchmarks.harness.results import REPO, command_line, cpu_machine, report
from benchmarks.harness.timing import TIME, parse_time_v
from benchmarks.harness.trio import generate


def merge_args(method: str, root: Path, out: Path) -> list[str]:
    return [
        f"method={method}",
        f"backbone.base={root / 'base'}",
        f"+backbone.sources.sft={root / 'sft'}",
        f"+backbone.sources.rlvr={root / 'rlvr'}",
        f"output={out}",
        "overwrite=true",
    ]


IN_PROCESS = """
import sys, time
from dots.runtime.allocator import reuse_freed_memory
reuse_freed_memory()
from dots.merge.executor import merge_checkpoints
root, out, method = sys.argv[1:4]
start = time.perf_counter()
merge_checkpoints(f"{root}/base", {"sft": f"{root}/sft", "rlvr": f"{root}/rlvr"}, out, method, overwrite=True)
print(time.perf_counter() - start)
"""


def time_merge(method: str, root: Path, cold: bool, env: dict[str, str]) -> tuple[float, float]:
    """(whole-process wall, in-process merge seconds), one run each (cold: caches dropped before each)."""
    out = root / "merged"
    if cold:
        drop_caches()

    def run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode:
            raise SystemExit(f"{what} failed:\n{proc.stderr[-2000:]}")
        return proc

    merge = [sys.executable, "-m", "dots.merge", *merge_args(method, root, out), f"hydra.run.dir={root / 'hydra'}"]
    wall = parse_time_v(run([TIME, "-v", *merge], "merge").stderr)[0]
    if cold:
        drop_caches()
    proc = run([sys.executable, "-c", IN_PROCESS, str(root), str(out), method], "in-process merge")
    shutil.rmtree(out, ignore_errors=True)
    return wall, float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-limits"))
    parser.add_argument("--shape", default="qwen2.5-0.5b")
    parser.add_argument("--methods", nargs="+", default=["task_arithmetic", "ties"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    parser.add_argument("--record", action="store_true", help="append the table to benchmarks/results/merge.md")
    parser.add_argument("--machine", default=None)
    args = parser.parse_args()

    root = args.root / args.shape
    if not (root / "rlvr" / "config.json").exists():
        generate(root, "--shape", args.shape, "--dtype", "bfloat16", "--noise", "finetune")
    inputs = sorted(p for key in ("base", "sft", "rlvr") for p in (root / key).glob("*.safetensors"))
    read_bytes = sum(p.stat().st_size for p in inputs)
    write_bytes = sum(p.stat().st_size for p in (root / "base").glob("*.safetensors"))

    can_drop = drop_caches()
    cold = [read_bytes / read_seconds(inputs) / GB for _ in range(args.runs) if drop_caches()] if can_drop else []
    read_seconds(inputs)
    warm = [read_bytes / read_seconds(inputs) / GB for _ in range(args.runs)]
    scratch = root / "write-test.bin"
    buffered = [write_bytes / write_seconds(scratch, write_bytes, sync=False) / GB for _ in range(args.runs)]
    synced = [write_bytes / write_seconds(scratch, write_bytes, sync=True) / GB for _ in range(args.runs)]
    memory = memory_gbps(args.runs)
    bw = {
        "cold_read": statistics.median(cold) if cold else None,
        "warm_read": statistics.median(warm),
        "buffered_write": statistics.median(buffered),
        "synced_write": statistics.median(synced),
        "memory": memory,
    }
    print(json.dumps({k: (round(v, 2) if v else v) for k, v in bw.items()}), flush=True)
    floor_warm = read_bytes / GB / bw["warm_read"] + write_bytes / GB / bw["buffered_write"]
    floor_disk = max(read_bytes / GB / bw["cold_read"] if cold else 0.0, write_bytes / GB / bw["synced_write"])
    floor_memory = (read_bytes + write_bytes) / GB / memory

    env = {**os.environ, "DOTS_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    rows = []
    for method in args.methods:
        for state in ["warm", "cold"] if can_drop else ["warm"]:
            runs = [time_merge(method, root, state == "cold", env) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            inner = statistics.median(r[1] for r in runs)
            print(f"{method} {state}: process {wall:.2f} s, merge_checkpoints {inner:.2f} s", flush=True)
            rows.append((method, state, wall, inner))

    date = datetime.date.today().isoformat()
    machine = args.machine or cpu_machine()
    fmt = lambda v: f"{v:.2f}" if v else "not measured"  # noqa: E731
    lines = [
        "",
        f"## Merge vs the machine's limit (benchmarks/merge/limits.py) — {date}",
        "",
        f"Command: `{command_line()}`.",
        f"Machine: {machine}. Checkpoints: gen_checkpoints.py `--shape {args.shape} --dtype bfloat16 --noise finetune`;"
        f" the merge reads {read_bytes / GB:.2f} GB (base + 2 sources) and writes {write_bytes / GB:.2f} GB."
        f" Medians of {args.runs}.",
        "",
        "| bandwidth (GB/s) | cold disk read | page-cache read | buffered write | synced write | memory copy (r+w) |",
        "|---|---|---|---|---|---|",
        f"| measured | {fmt(bw['cold_read'])} | {fmt(bw['warm_read'])} | {fmt(bw['buffered_write'])} | "
        f"{fmt(bw['synced_write'])} | {fmt(bw['memory'])} |",
        "",
        f"Floors: warm I/O {floor_warm:.2f} s; disk (cold read ‖ synced write) {floor_disk:.2f} s;"
        f" memory (every byte once) {floor_memory:.2f} s.",
        "",
        "| method | page cache | process wall (s) | merge_checkpoints (s) | ÷ warm I/O floor | ÷ disk floor |",
        "|---|---|---|---|---|---|",
    ]
    for method, state, wall, inner in rows:
        lines.append(
            f"| {method} | {state} | {wall:.2f} | {inner:.2f} | {inner / floor_warm:.1f}× | {inner / floor_disk:.1f}× |"
        )
    report(lines, args.record, "merge")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
