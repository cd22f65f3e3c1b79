"""The `merge` and `search` subcommands of benchmarks/scale/large.py: every merge method, and the
search on each engine and τ̃ cache mode, at a large model's tensor shapes, each command under
GNU time and the memory guard."""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness.results import report
from benchmarks.scale.large_trio import SOURCES, env_for, generate, guarded, header, trio_facts


def merge_command(method: str, root: Path, args: argparse.Namespace) -> list[str]:
    extra = shlex.split(args.sar_options) if method == "sar" else []
    return [
        sys.executable,
        "-m",
        "dots.merge",
        f"method={method}",
        *extra,
        f"backbone.base={root / 'base'}",
        *(f"+backbone.sources.{s}={root / s}" for s in SOURCES),
        f"output={root / 'merged'}",
        "overwrite=true",
        f"cache_dir={root / 'merge-cache'}",
    ]


def cmd_merge(args: argparse.Namespace) -> dict[str, Any]:
    root = generate(args)
    facts = trio_facts(root)
    env = env_for(root)
    runs: dict[str, list[dict]] = {m: [] for m in args.methods}
    limits = {m: int(n) for m, n in (item.split("=") for item in args.method_runs)}
    for repeat in range(args.runs):
        shift = repeat % len(args.methods)
        for method in args.methods[shift:] + args.methods[:shift]:
            if any(r["failed"] for r in runs[method]) or len(runs[method]) >= limits.get(method, args.runs):
                continue  # stopped once (memory): not again; or all the runs this method gets
            shutil.rmtree(root / "merge-cache", ignore_errors=True)  # full cost: Fisher / τ̃ built in the run
            res = guarded(merge_command(method, root, args), args, env, root)
            shutil.rmtree(root / "merged", ignore_errors=True)
            res["repeat"] = repeat
            runs[method].append(res)
            print(
                f"  {method:<16} repeat {repeat + 1}: wall {res['wall_s']:7.1f} s  peak RSS {res['rss_gib']:5.2f} GiB"
                f" (anonymous {res['anon_gib']:5.2f})  load {res['load1']:.1f}"
                f"{'  FAILED: ' + res['failed'] if res['failed'] else ''}",
                flush=True,
            )
    shutil.rmtree(root / "merge-cache", ignore_errors=True)
    lines = header(
        f"Every merge method at {args.shape} tensor shapes, {args.layers} layers (benchmarks/scale/large.py merge)",
        args,
        facts,
        [r["load1"] for rs in runs.values() for r in rs],
    )
    lines += [
        f"Each run: `/usr/bin/time -v python -m dots.merge method=M backbone.base=BASE +backbone.sources.sft=SFT "
        f"+backbone.sources.rlvr=RLVR output=OUT overwrite=true cache_dir=EMPTY` (the method's packaged "
        f"defaults; sar adds `{args.sar_options}`); caches emptied before every run, so sar's Fisher pass and "
        f"dots_fixed's τ̃ build are inside its figures. Medians of {args.runs} runs"
        f"{' (' + ', '.join(args.method_runs) + ')' if args.method_runs else ''}, the method order rotated "
        "each repeat.",
        "",
        "| method | runs | median wall (s) | median peak RSS (GiB) | RSS min–max | peak anonymous RSS (GiB) "
        "| walls (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        done = [r for r in rs if not r["failed"]]
        if not done:
            r = rs[0]
            lines.append(
                f"| {method} | 0 of {len(rs)} | stopped after {r['wall_s']:.1f} | ≥ {r['rss_gib']:.2f} "
                f"at the stop | — | {r['anon_gib']:.2f} | {r['failed']} |"
            )
            continue
        rss = [r["rss_gib"] for r in done]
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in done)
        lines.append(
            f"| {method} | {len(done)} | {statistics.median(r['wall_s'] for r in done):.1f} "
            f"| {statistics.median(rss):.2f} | {min(rss):.2f}–{max(rss):.2f} "
            f"| {max(r['anon_gib'] for r in done):.2f} | {walls} |"
        )
    report(["", *lines], args.record, "scale")
    return {"facts": facts, "runs": runs}


def write_pool(path: Path, n: int = 8) -> Path:
    path.write_text(
        "\n".join(
            json.dumps({"question": f"What is {10 + 7 * i} + {21 + 5 * i}?", "answer": str(31 + 12 * i)})
            for i in range(n)
        )
        + "\n"
    )
    return path


def search_command(engine: str, root: Path, args: argparse.Namespace, cache: str = "disk") -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "dots.search",
        f"engine={engine}",
        "engine.dtype=bfloat16",
        f"engine.synth_cache={cache}",
        "backbone=custom",
        "backbone.name=gen",
        f"backbone.base={root / 'base'}",
        *(f"+backbone.sources.{s}={root / s}" for s in SOURCES),
        "backbone.prompt=plain",
        f"backbone.max_tokens={args.max_tokens}",
        "pool=jsonl",
        f"pool.path={root / 'pool.jsonl'}",
        "selection.n=2",
        "selection.m=2",
        "selection.threshold=1.0",
        f"search.n_trials={args.trials}",
        "search.n_startup_trials=2",
        "search.k=2",
        f"run_dir={root / f'search-{engine}-{cache}'}",
        f"cache_dir={root / 'cache'}",
        "export.enabled=false",
    ]
    if engine == "vllm":
        cmd += ["engine.enforce_eager=true", "engine.max_model_len=256"]
    return cmd


def build_taskvec_command(root: Path) -> list[str]:
    code = (
        "from dots.io.checkpoint import Checkpoint; from dots.vectors.cache import build_task_vectors; "
        f"build_task_vectors(Checkpoint({str(root / 'base')!r}), "
        f"{{k: Checkpoint({str(root)!r} + '/' + k) for k in {list(SOURCES)!r}}}, "
        f"cache_root={str(root / 'cache' / 'taskvec')!r})"
    )
    return [sys.executable, "-c", code]


def trial_times(run_dir: Path) -> list[dict[str, float]]:
    with open(run_dir / "trials.csv") as fh:
        return [
            {k[5:]: float(v) for k, v in row.items() if k.startswith("time_") and v not in ("", None)}
            for row in csv.DictReader(fh)
            if row["state"] == "COMPLETE"
        ]


def cmd_search(args: argparse.Namespace) -> dict[str, Any]:
    root = generate(args)
    facts = trio_facts(root)
    env = {**env_for(root), "VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib)}
    write_pool(root / "pool.jsonl")
    out: dict[str, Any] = {"facts": facts}
    if args.fresh_taskvec:
        shutil.rmtree(root / "cache", ignore_errors=True)
    out["taskvec"] = guarded(build_taskvec_command(root), args, env, root)
    print(f"τ̃ cache: {out['taskvec']['wall_s']:.1f} s, peak RSS {out['taskvec']['rss_gib']:.2f} GiB", flush=True)
    runs = [(e, c) for e in args.engines for c in args.synth_caches]
    for engine, cache in runs:
        shutil.rmtree(root / f"search-{engine}-{cache}", ignore_errors=True)
        res = guarded(search_command(engine, root, args, cache), args, env, root)
        res["trials"] = [] if res["failed"] else trial_times(root / f"search-{engine}-{cache}")
        out[f"{engine} {cache}"] = res
        swaps = [t["swap"] for t in res["trials"]]
        print(
            f"  {engine} ({cache}): wall {res['wall_s']:.1f} s, peak RSS {res['rss_gib']:.2f} GiB (anonymous sum "
            f"{res['anon_gib']:.2f}), swaps {[round(s, 2) for s in swaps]}",
            flush=True,
        )
    cache_gb = sum(f.stat().st_size for f in (root / "cache").rglob("*.safetensors")) / 1e9
    lines = header(
        f"The search at {args.shape} tensor shapes, {args.layers} layers (benchmarks/scale/large.py search)",
        args,
        facts,
        [out[f"{e} {c}"]["load1"] for e, c in runs] + [out["taskvec"]["load1"]],
    )
    command = shlex.join(["python", *search_command("ENGINE", Path("ROOT"), args, "CACHE")[1:]])
    lines += [
        f"Each run: `/usr/bin/time -v {command}`"
        " (vllm adds `engine.enforce_eager=true engine.max_model_len=256`; "
        f"`VLLM_CPU_KVCACHE_SPACE={args.kv_cache_gib}`). The τ̃ cache (density 0.3, per-tensor top-k, global γ; "
        f"compact on disk: {cache_gb:.2f} GB for the 2 sources) is built once before the engines run "
        f"(`dots.vectors.cache.build_task_vectors`: {out['taskvec']['wall_s']:.1f} s, peak RSS "
        f"{out['taskvec']['rss_gib']:.2f} GiB) and shared by all runs. swap = `engine.swap_coefficients(λ)`: "
        "`synth_cache=disk` reads θ0 and the compact τ̃ from disk at every swap, `memory` holds them resident "
        "(≈ 2 × θ0 + the compact τ̃).",
        "",
        "| engine | synth_cache | whole command (s) | peak RSS, largest process (GiB) "
        "| peak anonymous RSS, all processes (GiB) | trials | swap, median (s) | swaps (s) "
        "| generate, median (s) | trial, median (s) | engine start (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, cache in runs:
        r = out[f"{engine} {cache}"]
        if r["failed"]:
            lines.append(
                f"| {engine} | {cache} | stopped after {r['wall_s']:.1f} | ≥ {r['rss_gib']:.2f} "
                f"| {r['anon_gib']:.2f} | {r['failed']} | | | | | |"
            )
            continue
        t = r["trials"]

        def med(key: str, trials: list[dict[str, float]] = t) -> str:
            values = [x[key] for x in trials if key in x]
            return f"{statistics.median(values):.2f}" if values else "—"

        start = max((x.get("engine_start", 0.0) for x in t), default=0.0)
        swaps = ", ".join(f"{x['swap']:.2f}" for x in t)
        lines.append(
            f"| {engine} | {cache} | {r['wall_s']:.1f} | {r['rss_gib']:.2f} | {r['anon_gib']:.2f} | {len(t)} "
            f"| **{med('swap')}** | {swaps} | {med('generate')} "
            f"| {med('total')} | {start:.1f} |"
        )
    report(["", *lines], args.record, "scale")
    return out
