"""The trio of benchmarks/scale/large.py and what every subcommand shares: the trio generated once
under --root, its facts, the commands' environment, a command run under GNU time and the memory
guard, and the header of a RESULTS.md section."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.memory import mem_available_gib, time_guarded
from benchmarks.harness.results import REPO, command_line
from benchmarks.harness.trio import generate as generate_trio

SOURCES = ("sft", "rlvr")


def generate(args: argparse.Namespace) -> Path:
    """The trio under --root (generated unless a complete one is there)."""
    root = args.root
    marker = root / ".complete"
    options = ["--shape", args.shape, "--layers", str(args.layers), "--dtype", "bfloat16", "--noise", "finetune"]
    vocab = ["--vocab", str(args.vocab)] if args.vocab else []
    said = [*options, "--tokenizer", "--out", str(root), *vocab]  # the generator's arguments, as recorded
    if marker.exists() and json.loads(marker.read_text()) == said:
        return root
    print(f"generating {args.shape} ({args.layers} layers, bf16) under {root}", flush=True)
    t = time.perf_counter()
    generate_trio(root, *options, "--tokenizer", *vocab)
    print(f"generated in {time.perf_counter() - t:.0f} s", flush=True)
    marker.write_text(json.dumps(said))
    return root


def trio_facts(root: Path) -> dict[str, Any]:
    from dots.io.checkpoint import Checkpoint

    ckpt = Checkpoint(root / "base")
    sizes = {n: ckpt.info(n).numel for n in ckpt.names}
    largest = max(sizes, key=sizes.get)  # type: ignore[arg-type]
    return {
        "params": sum(sizes.values()),
        "largest": largest,
        "largest_numel": sizes[largest],
        "checkpoint_gb": ckpt.total_bytes / 1e9,
    }


def env_for(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "DOTS_OUTPUTS": str(root / "outputs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def guarded(cmd: list[str], args: argparse.Namespace, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """One command under GNU time and the memory guard: wall, peak RSS, peak anon sum, load, failure."""
    load = os.getloadavg()[0]
    available = mem_available_gib()
    proc, wall, rss = time_guarded(cmd, env, cwd, args.mem_limit_gib, args.min_available_gib)
    failed = proc.stopped or ("" if proc.returncode == 0 else f"exit code {proc.returncode}")
    if failed:
        print(f"FAILED ({failed}): {shlex.join(cmd)}\n{proc.stderr[-2500:]}", flush=True)
    return {
        "wall_s": wall,
        "rss_gib": rss,
        "anon_gib": proc.peak_anon_gib,
        "load1": load,
        "available_gib": available,
        "failed": failed,
        "stdout": proc.stdout[-4000:],
    }


def header(title: str, args: argparse.Namespace, facts: dict[str, Any], loads: list[float]) -> list[str]:
    date = args.date or datetime.date.today().isoformat()
    import torch

    vocab = f" --vocab {args.vocab}" if args.vocab else ""
    return [
        f"## {title} — {date}",
        "",
        f"Command: `{command_line()}`.",
        f"Machine: {args.machine}; torch {torch.__version__}; 1-min load average at the start of the runs: "
        f"{min(loads):.1f}–{max(loads):.1f}. No GPU was lent to this session: everything ran on the CPU.",
        f"Trio: benchmarks/harness/generate.py `--shape {args.shape} --layers {args.layers} --dtype bfloat16 "
        f"--noise finetune --tokenizer{vocab}` — {facts['params'] / 1e9:.2f} B parameters, "
        f"{facts['checkpoint_gb']:.2f} GB per checkpoint, largest tensor {facts['largest']} "
        f"({facts['largest_numel'] / 1e6:.0f} M entries, {4 * facts['largest_numel'] / 2**30:.2f} GiB in "
        "float32); sft = dense small noise (~90% of entries change in bf16), rlvr = sparse (~8%).",
        f"Memory guard: stop at {args.mem_limit_gib:g} GiB of anonymous RSS or MemAvailable < "
        f"{args.min_available_gib:g} GiB.",
        "",
    ]
