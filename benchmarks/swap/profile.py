"""Where a weight swap's time goes: torch.profiler over `engine.swap_coefficients(λ)`.

    python -m benchmarks.swap profile --engines hf vllm --repeats 5 [--record]

On the generated Qwen2.5-0.5B-shaped model of benchmarks/swap/latency.py (494 M bf16
parameters, "SFT" + "RLVR" τ̃ at density 0.3), one engine per kind; for each τ̃ cache mode
(`synth_cache=memory|disk`) one warm-up swap, then `--repeats` swaps under
`torch.profiler.profile(activities=[CPU])`. The library marks its own phases with
`record_function`: `dots.vectors.synth.read` (base and τ̃ read from the cache, γ applied),
`dots.vectors.synth.combine` (θ0 + Σλτ̃ in float32, cast to bf16), `dots.hf.copy` (copy into the
live parameters) and `dots.vllm.reload_weights` (vLLM's reload, which consumes the
synthesis: its own share is that label minus the two synth labels). vLLM runs with its
engine core in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the worker is
profiled here, and eager (`enforce_eager`) to start quickly; a swap does the same work
either way. Printed per swap (profiled total / repeats): the labelled phases (inclusive
time) and the ten aten ops with the most self time, plus the unprofiled wall time of
the same swaps for the profiler's overhead. `--trace DIR` writes Chrome traces.

Each case runs in the same engine over whole tensors (one block per tensor, as before blocks
were introduced; same bits) and with the float32 accumulator worked in blocks of
`dots.vectors.synth.CPU_BLOCK_ENTRIES` (the default), in the order A B B A, and the medians of
the unprofiled swaps of both passes are compared.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch

import dots.vectors.synth
from benchmarks.harness.results import append
from benchmarks.harness.timing import timed_each
from benchmarks.swap.model import build, lambdas, make_engine
from dots.runtime.allocator import reuse_freed_memory
from dots.runtime.timing import device_of

LABELS = ("dots.vectors.synth.read", "dots.vectors.synth.combine", "dots.hf.copy", "dots.vllm.reload_weights")


def profile_swaps(engine, lams: list[dict[str, float]], trace: Path | None) -> dict:
    """Unprofiled wall times of the swaps, then the same swaps under torch.profiler."""
    # warm-up: first touches, file cache
    walls = timed_each(engine.swap_coefficients, lams, warmup=lams[-1:], device=device_of(engine))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for lam in lams:
            engine.swap_coefficients(lam)
        profiled = time.perf_counter() - t
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    events = prof.key_averages()
    n = len(lams)
    labels = {e.key: e.cpu_time_total / 1e6 / n for e in events if e.key in LABELS}
    ops = sorted((e for e in events if e.key.startswith("aten::")), key=lambda e: e.self_cpu_time_total, reverse=True)
    top = [(e.key, e.self_cpu_time_total / 1e6 / n, e.count // n) for e in ops[:10]]
    return {"wall": statistics.median(walls), "walls": walls, "profiled": profiled / n, "labels": labels, "ops": top}


def report(kind: str, cache: str, blocks: str, res: dict) -> str:
    lines = [
        f"**{kind}, `synth_cache={cache}`, {blocks}**: swap {res['wall']:.3f} s "
        f"(median of {len(res['walls'])} unprofiled; "
        f"{res['profiled']:.3f} s per swap under the profiler)",
        "",
        "| phase (inclusive, per swap) | s | share of the profiled swap |",
        "|---|---|---|",
    ]
    labels = dict(res["labels"])
    if "dots.vllm.reload_weights" in labels:
        synth = labels.get("dots.vectors.synth.read", 0.0) + labels.get("dots.vectors.synth.combine", 0.0)
        labels["vLLM's own reload (reload_weights − synthesis)"] = labels["dots.vllm.reload_weights"] - synth
    for key, seconds in labels.items():
        lines.append(f"| `{key}` | {seconds:.3f} | {seconds / res['profiled']:.0%} |")
    lines += ["", "| aten op (self time, per swap) | s | calls |", "|---|---|---|"]
    lines += [f"| `{name}` | {seconds:.3f} | {calls} |" for name, seconds, calls in res["ops"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    reuse_freed_memory()  # as dots.search and vLLM's workers do
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dots-swap"))
    parser.add_argument("--layers", type=int, default=24, help="24 = Qwen2.5-0.5B")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["vllm", "hf"])
    parser.add_argument("--caches", nargs="+", default=["memory", "disk"], choices=["memory", "disk"])
    parser.add_argument("--trace", type=Path, default=None, help="directory for Chrome traces")
    parser.add_argument("--record", action="store_true", help="append the tables to benchmarks/results/swap.md")
    parser.add_argument("--machine", default=None, help="machine description for RESULTS.md")
    args = parser.parse_args()
    os.environ.setdefault("DOTS_PROGRESS", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the worker runs (and is profiled) here
    base, tv = build(args.workdir / f"l{args.layers}", args.layers)
    lams = lambdas(args.repeats)
    sections, summary = [], []
    blocked = dots.vectors.synth.CPU_BLOCK_ENTRIES
    settings = {"whole tensors": 2**62, f"blocks of {blocked} entries": blocked}
    for kind in args.engines:
        engine = make_engine(kind, base, tv, argparse.Namespace(enforce_eager=True, memory_utilization=None))
        for cache in args.caches:
            walls: dict[str, list[float]] = {}
            order = [*settings, *reversed(settings)]  # A B B A: neither setting always runs first
            for blocks in order:
                dots.vectors.synth.CPU_BLOCK_ENTRIES = settings[blocks]  # read when the synthesiser sizes its scratch
                engine.set_task_vectors(tv, synth_cache=cache)
                tag = "whole" if settings[blocks] != blocked else "blocked"
                trace = args.trace / f"{kind}-{cache}-{tag}.json" if args.trace else None
                res = profile_swaps(engine, lams, trace)
                if blocks not in walls:
                    sections.append(report(kind, cache, blocks, res))
                    print(sections[-1], flush=True)
                walls.setdefault(blocks, []).extend(res["walls"])
                engine.set_task_vectors(None)
                gc.collect()
            whole, block = (statistics.median(w) for w in walls.values())
            summary.append(f"| {kind} | {cache} | {whole:.3f} | {block:.3f} | **{whole / block:.2f}×** |")
        engine.close()
        del engine
        gc.collect()
    dots.vectors.synth.CPU_BLOCK_ENTRIES = blocked
    table = (
        "| engine | synth_cache | swap, whole tensors (s) | swap, blocks (s) | whole / blocks |\n"
        "|---|---|---|---|---|\n" + "\n".join(summary) + "\n"
    )
    print(table)
    sections.insert(
        0, "Unprofiled swaps, medians of 2 × repeats (order A B B A), both settings in the same engine:\n\n" + table
    )
    if args.record:
        machine = args.machine or f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
        command = "python -m benchmarks.swap profile " + " ".join(sys.argv[1:])
        head = (
            f"\n## Profile of a weight swap (benchmarks/swap/profile.py, torch.profiler) — {date.today()}\n\n"
            f"Command: `{command}`. Machine: {machine}. Model: generated Qwen2.5-0.5B shapes "
            f"({args.layers} layers, bf16), τ̃ of two sources at density 0.3; λ: {lams}.\n\n"
        )
        append(head + "\n".join(sections), "swap")


if __name__ == "__main__":
    main()
