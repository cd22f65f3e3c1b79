"""The measurements of benchmarks/swap/latency.py on live engines: swaps on one engine per τ̃
mode (held in memory in each worker's layout or the checkpoint's, or read from disk) against a
save-and-restart per λ with the same greedy output, and a tensor-parallel (TP=2) vLLM engine."""

from __future__ import annotations

import gc
import time
from pathlib import Path

from benchmarks.harness.timing import swap_seconds
from benchmarks.swap.model import greedy, lambdas, make_engine, save_merged
from dots.options.engine import EngineOptions


def modes(kind: str) -> list[str]:
    """τ̃ modes measured on one engine, in order: vLLM adds the checkpoint-layout resident path."""
    return ["memory", "memory_checkpoint", "disk"] if kind == "vllm" else ["memory", "disk"]


def measure_engine(kind: str, base: Path, tv, lams, workdir: Path, args) -> dict:
    """Swaps on one live engine (τ̃ held in memory, then read from disk), then restarts."""
    out: dict = {"restart": [], "restart_write": [], "restart_start": [], "match": []}
    for cache in modes(kind):
        out[f"swap_{cache}"], out[f"warmup_{cache}"] = [], []
    t = time.perf_counter()
    engine = make_engine(kind, base, tv, args, synth_cache="memory")
    out["startup_once"] = time.perf_counter() - t
    if kind == "vllm":
        out["resident_tp1"] = engine.resident_info()
        print(f"[vllm] resident (TP=1): {out['resident_tp1']}", flush=True)
    swapped = []
    for cache in modes(kind):
        if cache == "memory_checkpoint":
            t = time.perf_counter()
            engine.set_task_vectors(tv, synth_cache="memory", layout="checkpoint")
            out["resident_checkpoint"] = engine.resident_info()
            print(
                f"[vllm] checkpoint-layout resident: {out['resident_checkpoint']} "
                f"(set-up {time.perf_counter() - t:.1f} s)",
                flush=True,
            )
        if cache == "disk":
            engine.set_task_vectors(tv, synth_cache="disk")  # frees the resident copy
        for lam in lambdas(args.warmup, seed=1):  # first touches of fresh buffers: once per run, not per trial
            out[f"warmup_{cache}"].append(swap_seconds(engine, lam))
            print(f"[{kind}] warm-up swap ({cache}) {lam}: {out[f'warmup_{cache}'][-1]:.3f} s", flush=True)
        for i, lam in enumerate(lams):
            out[f"swap_{cache}"].append(swap_seconds(engine, lam))
            text = greedy(engine)
            if cache == "memory":
                swapped.append(text)
            else:
                assert text == swapped[i], "disk and memory synthesis gave different models"
            print(f"[{kind}] swap ({cache}) {lam}: {out[f'swap_{cache}'][-1]:.3f} s", flush=True)
    engine.close()
    del engine
    gc.collect()
    out["swapped"] = swapped
    for lam, expected in zip(lams, swapped):
        target = workdir / f"merged-{kind}"
        t = time.perf_counter()
        save_merged(tv, lam, base, target)
        t_write = time.perf_counter() - t
        fresh = make_engine(kind, target, None, args)
        total = time.perf_counter() - t
        out["restart_write"].append(t_write)
        out["restart_start"].append(total - t_write)
        out["restart"].append(total)
        out["match"].append(greedy(fresh) == expected)
        fresh.close()
        del fresh
        gc.collect()
        print(
            f"[{kind}] restart {lam}: write {t_write:.2f} s + start {total - t_write:.2f} s, "
            f"same output as swap: {out['match'][-1]}",
            flush=True,
        )
    return out


def measure_tp2(base: Path, tv, lams, expected: list[str], args) -> dict:
    """A TP=2 vLLM engine with τ̃ in memory: each rank's resident bytes, swap times, outputs."""
    from dots.engines.vllm.engine import VLLMEngine

    t = time.perf_counter()
    engine = VLLMEngine(
        base,
        EngineOptions(
            dtype="bfloat16",
            max_model_len=512,
            synth_cache="memory",
            tensor_parallel_size=2,
            enforce_eager=args.enforce_eager,
            gpu_memory_utilization=args.memory_utilization,
        ),
        task_vectors=tv,
    )
    out: dict = {"startup": time.perf_counter() - t, "resident": engine.resident_info(), "swap": [], "match": []}
    print(f"[vllm TP=2] resident: {out['resident']}", flush=True)
    try:
        for lam in lambdas(args.warmup, seed=1):
            engine.swap_coefficients(lam)
        for lam, want in zip(lams, expected):
            out["swap"].append(swap_seconds(engine, lam))
            out["match"].append(greedy(engine) == want)
            print(f"[vllm TP=2] swap {lam}: {out['swap'][-1]:.3f} s, output == TP=1: {out['match'][-1]}", flush=True)
    finally:
        engine.close()
    return out
