"""The cost of crash-safe writes (#48): the same commands at two commits of dots, side by side.

    python -m benchmarks.merge commit [--before 9ef804c] [--after HEAD] [--size-gb 1] [--runs 5]
                                      [--root DIR] [--record]

Each commit is checked out with `git worktree add` and run from there, alternately (before, after,
before, ...), so load drifts hit both alike. Three measurements, medians of `--runs`:
- a merge that replaces its previous output (`python -m dots.merge method=task_arithmetic
  overwrite=true`) on a generated bf16 trio of `--size-gb` per checkpoint: the writer, the syncs and
  the switch (an atomic exchange after #48);
- a lab search's export replaced by a rerun of its run (`backbone.config_from` toggled, so only the
  export stage runs): the export through the same commit protocol;
- the CPU swap (`dots.vectors.synth.synthesize` of the generated trio, the streaming path, τ̃ built
  once per commit), which #48 must leave unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.results import command_line, cpu_machine, report, section
from benchmarks.harness.trio import generate

REPO = Path(__file__).resolve().parents[2]
SEARCH = ["engine=hf", "search.n_trials=2", "search.n_startup_trials=2", "pool.size=8", "selection.n=2"]
SEARCH += ["selection.m=2", "search.k=1", "confirm.enabled=false", "run_dir=run", "cache_dir=cache"]
SWAP = """import sys, time, torch
from pathlib import Path
from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import build_task_vectors
from dots.vectors.synth import synthesize
root = Path(sys.argv[1]); torch.set_num_threads(1)
tv = build_task_vectors(Checkpoint(root / "base"), {k: Checkpoint(root / k) for k in ("sft", "rlvr")},
                        cache_root=Path(sys.argv[2]))
times = []
for lam in (0.5, 0.7, 0.9, 1.1):
    start = time.perf_counter()
    for _name, tensor in synthesize(tv, {"sft": lam, "rlvr": 2 - lam}, "cpu"):
        pass
    times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2])
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, stdout) of `cmd`; stops when it fails."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start, done.stdout


def checkout(ref: str, where: Path) -> dict[str, str]:
    """A worktree of `ref` at `where`; the environment that runs dots from it."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=True)  # (a killed run's, removed)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref], check=True)
    return {**os.environ, "PYTHONPATH": str(where), "DOTS_PROGRESS": "0", "HF_HUB_OFFLINE": "1"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="9ef804c", help="the commit before the protocol (default: #48's parent)")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--size-gb", type=float, default=1.0, help="each generated checkpoint's size (bf16)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--record", action="store_true", help="append the table to benchmarks/results/merge.md")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="dots-commit-"))
    trio = root / "trio"
    if not (trio / "rlvr").is_dir():
        generate(trio, "--size-gb", str(args.size_gb), "--dtype", "bfloat16")
    sides = {"before": args.before, "after": args.after}
    envs, times = {}, {(m, s): [] for m in ("merge", "export", "swap") for s in sides}
    try:
        for side, ref in sides.items():
            envs[side] = checkout(ref, root / f"src-{side}")
            (root / side).mkdir(exist_ok=True)
            timed([sys.executable, "-m", "dots.search", *SEARCH], root / side, envs[side])  # the run to re-export
        merge = [sys.executable, "-m", "dots.merge", "method=task_arithmetic", f"backbone.base={trio / 'base'}"]
        merge += [f"+backbone.sources.{k}={trio / k}" for k in ("sft", "rlvr")] + ["output=merged", "overwrite=true"]
        for run in range(args.runs + 1):  # run 0: the first output and the caches, not counted
            for side in sides:
                where, env = root / side, envs[side]
                merged, _ = timed(merge, where, env)
                config_from = "sft" if run % 2 == 0 else "base"
                exported, _ = timed(
                    [sys.executable, "-m", "dots.search", *SEARCH, f"backbone.config_from={config_from}"], where, env
                )
                _, out = timed([sys.executable, "-c", SWAP, str(trio), str(where / "swap-cache")], where, env)
                if run:
                    times["merge", side].append(merged)
                    times["export", side].append(exported)
                    times["swap", side].append(float(out.split()[-1]))
                print(
                    f"run {run} {side}: merge {merged:.2f} s, export run {exported:.2f} s, swap {out.split()[-1]} s",
                    flush=True,
                )
    finally:
        for side in sides:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(root / f"src-{side}")], check=False
            )
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    rows = ["| what | before (s) | after (s) | after / before |", "|---|---:|---:|---:|"]
    for what in ("merge", "export", "swap"):
        b, a = statistics.median(times[what, "before"]), statistics.median(times[what, "after"])
        rows.append(f"| {what} | {b:.3f} | {a:.3f} | {a / b:.3f} |")
    size = sum(f.stat().st_size for f in (trio / "base").glob("*.safetensors")) / 1e9  # (a reused trio's own)
    body = [f"`{command_line()}`; before {args.before}, after {args.after}; {size:.2f} GB per checkpoint (bf16);",
            f"medians of {args.runs}, alternating; {cpu_machine()}.", "", *rows]  # fmt: skip
    report(
        section("The cost of crash-safe writes (#48): merge, export and swap, before vs after", None, body),
        args.record,
        "merge",
    )


if __name__ == "__main__":
    main()
