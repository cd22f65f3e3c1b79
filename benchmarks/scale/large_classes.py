"""The `classes` subcommand of benchmarks/scale/large.py: where a swap's time and memory go per
tensor class — synthesis alone, then swaps of each live engine with the stream it consumes timed."""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from typing import Any

from benchmarks.harness.memory import own_rss_gib, start_watchdog, status_kb
from benchmarks.harness.results import report
from benchmarks.harness.timing import swap_seconds
from benchmarks.scale.large_stream import StreamTimer, class_table, patch_sharded, patch_synthesis
from benchmarks.scale.large_trio import SOURCES, generate, header, trio_facts


def cmd_classes(args: argparse.Namespace) -> dict[str, Any]:
    start_watchdog(args.min_available_gib)
    root = generate(args)
    facts = trio_facts(root)
    os.environ.update(
        DOTS_PROGRESS="0", VLLM_CPU_KVCACHE_SPACE=str(args.kv_cache_gib), VLLM_ENABLE_V1_MULTIPROCESSING="0"
    )
    import torch

    from benchmarks.swap.model import lambdas
    from dots.io.checkpoint import Checkpoint
    from dots.options.engine import EngineOptions
    from dots.vectors import build_task_vectors

    base = Checkpoint(root / "base")
    t = time.perf_counter()
    tv = build_task_vectors(base, {k: Checkpoint(root / k) for k in SOURCES}, cache_root=root / "cache" / "taskvec")
    print(f"τ̃ cache ready in {time.perf_counter() - t:.1f} s", flush=True)
    merged = set(tv.names)
    info = {
        n: (
            base.info(n).numel,
            base.info(n).nbytes,
            sum(e.tau_bytes([n]) for e in tv.entries.values()) if n in merged else 0,
        )
        for n in base.names
    }
    lams = lambdas(args.repeats)
    warm = lambdas(1, seed=1)[0]
    out: dict[str, Any] = {"facts": facts, "lambdas": lams}
    sections: list[list[str]] = []
    loads = [os.getloadavg()[0]]

    # (1) synthesis alone, per-tensor memory (glibc's default allocator: large blocks go back to the system)
    import dots.vectors.synth as synth

    timer = StreamTimer(measure_memory=True)
    walls = []
    for lam in [warm, *lams]:
        gc.collect()
        timer.idle_kb = status_kb("self", "VmRSS")
        t = time.perf_counter()
        for _name, tensor in timer.wrap(synth.synthesize(tv, lam, device="cpu", base=base)):
            del tensor
        walls.append(time.perf_counter() - t)
    for d in (timer.synth, timer.consume, timer.peak_mib):
        for name in d:
            d[name] = d[name][1:]  # drop the warm-up pass
    out["synthesis"] = {"walls": walls, "synth": timer.synth, "peak_mib": timer.peak_mib}
    print(f"synthesis alone: {[round(w, 2) for w in walls]}", flush=True)
    sections.append(
        [
            f"**Synthesis alone** (`dots.vectors.synth.synthesize`, τ̃ read from the cache; one warm-up "
            f"pass, then {args.repeats}): {statistics.median(walls[1:]):.2f} s per model "
            f"(passes: {', '.join(f'{w:.2f}' for w in walls[1:])}).",
            "",
            *class_table(timer, info, walls[1:], "consumer", len(SOURCES)),
            "",
        ]
    )

    for kind in args.engines:
        loads.append(os.getloadavg()[0])
        timer = StreamTimer()
        patch_synthesis(timer)
        sharded: dict[str, tuple[int, int, int]] = {}  # vLLM's own parameters, when it holds τ̃ in their layout
        patch_sharded(timer, sharded)
        t = time.perf_counter()
        first = args.synth_caches[0]
        if kind == "hf":
            from dots.engines.hf import HFEngine

            engine = HFEngine(root / "base", EngineOptions(dtype="bfloat16", synth_cache=first), task_vectors=tv)
            consumer = "copy into the parameter"
        else:
            from dots.engines.vllm.engine import VLLMEngine

            engine = VLLMEngine(
                root / "base",
                EngineOptions(dtype="bfloat16", max_model_len=256, synth_cache=first, enforce_eager=True),
                task_vectors=tv,
            )
            consumer = "vLLM reload_weights consuming it"
        start = time.perf_counter() - t
        for cache in args.synth_caches:
            if cache != first:
                engine.set_task_vectors(tv, synth_cache=cache)
            engine.swap_coefficients(warm)
            for d in (timer.synth, timer.consume):
                d.clear()
            swaps = []
            for lam in lams:
                swaps.append(swap_seconds(engine, lam))
                print(
                    f"[{kind} {cache}] swap {lam}: {swaps[-1]:.2f} s  (RSS {own_rss_gib():.2f} GiB)",
                    flush=True,
                )
            out[f"{kind} {cache}"] = {
                "start": start,
                "swaps": swaps,
                "synth": dict(timer.synth),
                "consume": dict(timer.consume),
                "rss_gib": own_rss_gib(),
            }
            listed = ", ".join(f"{s:.2f}" for s in swaps)
            layout = sharded or info  # the patched `_combine` ran: τ̃ held in vLLM's parameters' layout
            written = "written in place (vLLM's parameters)" if sharded else consumer
            sections.append(
                [
                    f"**{kind} engine swap, `synth_cache={cache}`** (`engine.swap_coefficients(λ)`; engine "
                    f"start {start:.1f} s, one warm-up swap, then {args.repeats}; this process's RSS after "
                    f"them {own_rss_gib():.2f} GiB): median "
                    f"{statistics.median(swaps):.2f} s (swaps: {listed}).",
                    "",
                    *class_table(timer, layout, swaps, written, len(SOURCES)),
                    "",
                ]
            )
            sharded.clear()
            timer.synth.clear()
            timer.consume.clear()
        engine.close()
        del engine
        gc.collect()
    del torch
    lines = header(
        f"Weight swap per tensor class at {args.shape} tensor shapes, {args.layers} layers "
        "(benchmarks/scale/large.py classes)",
        args,
        facts,
        loads,
    )
    lines += [
        f"λ: {lams} (warm-up {warm}). Per class: the tensors' summed seconds per swap (median over the swaps); "
        '"θ0 + compact τ̃" is what `synth_cache=disk` reads per swap (θ0 in bf16, each source\'s compact '
        'τ̃); "peak RSS '
        'above idle" is the largest VmHWM − idle RSS while one tensor of the class was built (reset before each '
        "tensor), i.e. the working set of building it (θ0, the τ̃ read, the float32 scratch block, the output).",
        "",
    ]
    for section in sections:
        lines += section
    report(["", *lines], args.record, "scale")
    return out
