"""The report of benchmarks/merge/mergekit.py: the timing table, the RESULTS.md section with the
machine and the command, and every raw number as JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.results import append, command_line
from benchmarks.merge.mergekit_equality import Comparison, equality_table
from benchmarks.merge.mergekit_runs import Run, build_cases, mergekit_config


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def timing_table(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    runs = any(s.get("mk_runs", s["runs"]) != s["runs"] or "mk_failed" in s for _, _, s in rows)
    lines = [
        "| size | method | dots wall (s) | mergekit wall (s) | mergekit/dots wall | dots peak RSS (GiB) "
        "| mergekit peak RSS (GiB) | dots/mergekit RSS | per-repeat mergekit/dots wall "
        "| per-repeat dots/mergekit RSS |" + (" runs dots / mergekit | dots RSS min–max |" if runs else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if runs else ""),
    ]
    for size, label, s in rows:
        extra = ""
        if runs:
            lo, hi = s["dots_rss_range"]
            extra = f" {s['runs']} / {s.get('mk_runs', 1 if 'mk_failed' in s else s['runs'])} | {lo:.2f}–{hi:.2f} |"
        if "mk_failed" in s:
            why, wall, rss, anon = s["mk_failed"]
            lines.append(
                f"| {size} | {label} | {s['dots_wall']:.1f} | failed ({why}) after {wall:.1f} | — "
                f"| {s['dots_rss']:.2f} | ≥ {rss:.2f} at failure (anonymous {anon:.2f}) | — | — | — |{extra}"
            )
            continue
        lines.append(
            f"| {size} | {label} | {s['dots_wall']:.1f} | {s['mk_wall']:.1f} | **{s['speedup']:.2f}** "
            f"| {s['dots_rss']:.2f} | {s['mk_rss']:.2f} | **{s['rss_ratio']:.2f}** "
            f"| {spread(s['wall_pairs'])} | {spread(s['rss_pairs'])} |{extra}"
        )
    return lines


def machine_description() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu}), {mem:.0f} GiB RAM, {platform.platform()}"


def record(
    args: argparse.Namespace,
    versions: dict[str, str],
    mk_options: list[str],
    date: str,
    rows: list[tuple[str, str, dict[str, Any]]],
    comparisons: list[Comparison],
    loads: list[float],
) -> None:
    command = command_line()
    shape = "" if not (args.layers or args.vocab) else f" (overridden: layers {args.layers}, vocab {args.vocab})"
    big = [s for s in args.sizes if s in ("7b", "70b")]
    widths = (
        "the real Qwen2.5 widths and depths (tied embeddings, vocab 151936)"
        if not big
        else "; ".join(f"{s}: {SHAPE_TEXT[s]}" for s in args.sizes)
    )
    mk_runs = args.runs if args.mergekit_runs is None else min(args.runs, args.mergekit_runs)
    repeats = (
        f"Medians of {args.runs} runs per tool, the tools alternating first/second in each repeat"
        if mk_runs == args.runs
        else f"dots: medians of {args.runs} runs; mergekit: {mk_runs} run(s) (in the first repeat(s), after dots)"
    )
    guard = (
        f" Memory guard (`harness.memory.run_guarded`): a run is stopped when its anonymous RSS exceeds "
        f"{args.mem_limit_gib:g} GiB or MemAvailable falls below {args.min_available_gib:g} GiB."
    )
    text = [
        "",
        f"## Streaming merge vs mergekit {versions['mergekit']} (K=2, bf16) — {date}",
        "",
        f"Command: `{command}` (each run: `/usr/bin/time -v python -m dots.merge method=M method.KEY=V ... "
        "backbone.base=BASE +backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT overwrite=true` and "
        f"`/usr/bin/time -v mergekit-yaml CONFIG.yml OUT {shlex.join(mk_options)}`, config `dtype: float32`, "
        "`out_dtype: bfloat16`; the matching method parameters are in the script's docstring).",
        f"Machine: {args.machine or machine_description()}; torch {torch.__version__}; mergekit "
        f"{versions['mergekit']} in its own venv (torch {versions['torch']}, transformers {versions['transformers']}); "
        f"1-min load average at the start of the runs: {min(loads):.1f}–{max(loads):.1f}.",
        f"Checkpoints: benchmarks/harness/generate.py `--shape SHAPE --dtype bfloat16 --noise finetune`{shape}: "
        f"{widths}, bf16; sft = base + dense noise "
        "(~90% of entries change in bf16), rlvr = base + sparse smaller noise (~8% change, half of them against "
        f"sft's sign). {repeats}; "
        f"ratios of medians and per-repeat paired ratios (median and range).{guard}",
        "",
        *timing_table(rows),
        "",
        "Merged tensors, dots vs mergekit (outputs of the last repeat; dare_ties also once at p = 0):",
        "",
        *(equality_table(comparisons) if comparisons else ["(not compared: `--no-compare`)"]),
        "",
        "Differences by definition (details in the script's docstring): task_arithmetic and ram are the same "
        "computation in both (no entry may differ); ties trims with a floor k and an unstable argsort at the "
        "threshold magnitude (dots: round(k), ties to the lower index) and elects + on an exact zero sign sum "
        "(dots: 0), so entries tied at a trim threshold or with a zero sign sum may differ; dare_ties draws its "
        "masks from another RNG (at p > 0 the outputs agree only in distribution) and at p = 0 may differ only "
        'where the sign sum is 0. "differ elsewhere" counts differing entries outside those sets.',
        "",
    ]
    append("\n".join(text), "merge")


def save(
    args: argparse.Namespace,
    date: str,
    versions: dict[str, str],
    mk_options: list[str],
    runs: list[Run],
    rows: list[tuple[str, str, dict[str, Any]]],
    comparisons: list[Comparison],
) -> Path:
    """Every raw number so far into `--out` (rewritten after each case, so an interrupted run keeps them)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": sys.argv,
                "date": date,
                "machine": args.machine or machine_description(),
                "versions": versions,
                "dots_torch": torch.__version__,
                "mergekit_options": mk_options,
                "cases": [
                    {**asdict(c), "mergekit_config": mergekit_config(c, Path("ROOT"))}
                    for m in args.methods
                    for c in build_cases(m, args.density, args.p)
                ],
                "runs": [asdict(r) for r in runs],
                "summary": [{"size": s, "case": c, **v} for s, c, v in rows],
                "equality": [asdict(c) for c in comparisons],
            },
            indent=2,
        )
    )
    return args.out


SHAPE_TEXT = {
    "7b": "Qwen2.5-7B widths (hidden 3584, 28/4 heads, MLP 18944, untied 152064-token embedding and lm_head)",
    "70b": "Llama-3-70B widths (hidden 8192, 64/8 heads, MLP 28672, untied 128256-token embedding and lm_head)",
}
