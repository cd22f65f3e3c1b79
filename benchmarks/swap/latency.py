"""Weight-swap latency of a live engine vs the official save-and-restart trial (DoTS search).

The official DoTS code prepares each Optuna trial by writing the merged model to disk and
starting a new vLLM engine on it. dots keeps one engine and swaps its weights in place.
Both sides are measured in the same run, on the same generated model and the same λ
sequence, with the same engine settings:

- swap     `engine.swap_coefficients(λ)`: θ0 + Σλτ̃ built inside the worker from τ̃ held
           in memory (`synth_cache=memory`) or read from the cache on disk (`disk`), then
           loaded and a prefix-cache reset (everything a trial needs). vLLM with τ̃ in memory:
           in each worker's own parameters' layout, written in place (`dots.engines.
           vllm_resident`, since #18 part 2), and, for comparison in the same engine, the
           path before it: the whole model in the checkpoint's layout, then `reload_weights`
           (`memory (checkpoint layout)` in the table);
- restart  synthesize θ(λ) and write it as safetensors, then start a fresh engine on it
           until it is ready to generate (its shutdown is not counted).

After every swap and every restart the greedy output of one prompt is recorded; the two
must agree for each λ (the swap builds the very model the restart loads).

The model is generated (nothing is downloaded): Qwen2.5-0.5B's shapes (24 layers, hidden
896, 14 heads of 64, 2 KV heads, MLP 4864, vocab 151936, tied embeddings; 494 M
parameters) in bfloat16, with a word-level tokenizer of the same vocabulary size, plus
an "SFT" (dense noise) and an "RLVR" (sparse, smaller noise) source and their τ̃ cache.

    python -m benchmarks.swap latency --workdir /tmp/dots-swap --engines vllm hf --repeats 5

`--layers 2` gives a quick smoke run. `--tp2` also starts a vLLM engine with
tensor_parallel_size 2 (τ̃ in memory) and reports each rank's resident bytes beside the TP=1
worker's, its swap time, and whether its greedy outputs equal the TP=1 swaps'. Results go to
stdout as a Markdown table. Before the
timed swaps of each τ̃ mode, `--warmup` swaps (default 1, other λ) touch the buffers a swap
allocates for the first time — a cost a search pays in its first trial only; they are
reported apart.

`--forms dense sparse index bitmask` measures only the resident forms of τ̃ (#28): per form and
`--engines`, a fresh engine started with τ̃ resident in it (start time; vLLM: its worker's peak
RSS and its own split of each swap, writing vs post-load processing), medians of `--repeats`
swaps, each against its memory-traffic floor (θ0 read + τ̃ read in that form + the parameters
written, over the memory bandwidth `harness.floors.memory_gbps` measures in the same run), with
the resident bytes; one plain start (no τ̃) beside them. `--classes` adds the synthesis alone
per tensor class:

    python -m benchmarks.swap latency --layers 24 --repeats 5 --engines hf vllm --enforce-eager \
        --forms dense sparse index bitmask --classes

The table also gives the τ̃ cache's size (compact since cache version 2: θ_i's values at the
mask plus a bitmask or positions; dense float32 τ⊙M before) and the memory-traffic floor of
one synthesis: the bytes it must move — θ0 read, τ̃ read, the output written — over this
machine's memory-copy bandwidth (`harness.floors.memory_gbps`); with `synth_cache=disk`, the
same plus θ0 and τ̃ read from the page cache at its measured rate (`harness.floors.read_seconds`).
Both for the compact τ̃ and for the dense float32 τ̃ of cache version 1 (4 bytes per parameter).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.harness.checkpoints import SHAPES
from benchmarks.harness.timing import timed_each
from benchmarks.swap.floors import FORMS, floors, forms_table
from benchmarks.swap.model import QWEN_05B, build, lambdas
from benchmarks.swap.restart import measure_engine, measure_tp2, modes
from dots.io.checkpoint import Checkpoint
from dots.runtime.allocator import return_freed_memory, reuse_freed_memory


def measure_synthesis(tv, lams, device: str, resident: bool = False) -> list[float]:
    from dots.vectors.synth import ResidentSynthesizer, synthesize

    make = ResidentSynthesizer(tv, device=device) if resident else (lambda lam: synthesize(tv, lam, device=device))

    def drain(lam: dict[str, float]) -> None:
        for _, tensor in make(lam):
            del tensor

    return timed_each(drain, lams, device=device)


def main() -> None:
    reuse_freed_memory()  # as the dots.search process does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dots-swap"))
    parser.add_argument("--layers", type=int, default=24, help="24 = Qwen2.5-0.5B")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engines", nargs="+", default=["vllm", "hf"], choices=["vllm", "hf"])
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM without compilation (both sides)")
    parser.add_argument("--memory-utilization", type=float, default=None)
    parser.add_argument("--synthesis", action="store_true", help="also time synthesis alone (always on CUDA)")
    parser.add_argument("--tp2", action="store_true", help="also a vLLM engine with tensor_parallel_size 2")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed swaps (other λ) before the timed ones, per τ̃ mode; reported apart",
    )
    parser.add_argument(
        "--forms",
        nargs="+",
        choices=FORMS,
        help="only the resident-forms table (#28): each form on each engine, against its memory-traffic floor",
    )
    parser.add_argument("--classes", action="store_true", help="with --forms: synthesis per tensor class too")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="another model's widths (qwen2.5-7b); default 0.5B's")
    parser.add_argument("--vocab", type=int, help="with --shape: a smaller vocabulary (smoke tests)")
    args = parser.parse_args()
    os.environ.setdefault("DOTS_PROGRESS", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default share does not fit here
    shape, workdir = QWEN_05B, args.workdir / f"l{args.layers}"
    if args.shape:
        shape = SHAPES[args.shape]
        if args.vocab:
            shape = dataclasses.replace(shape, vocab=args.vocab)
        workdir = args.workdir / f"{args.shape}-v{shape.vocab}-l{args.layers}"
    t = time.perf_counter()
    base, tv = build(workdir, args.layers, shape)
    return_freed_memory()  # building the cache here leaves its transients on the heap (12 GB at 7B widths)
    params = sum(Checkpoint(base).info(n).numel for n in Checkpoint(base).names)
    print(f"model: {params / 1e6:.0f} M parameters, bf16; build/cache {time.perf_counter() - t:.0f} s", flush=True)
    lams = lambdas(args.repeats)
    if args.forms:
        forms_table(base, tv, lams, args)
        return
    rows = floors(base, tv)
    for resident in (False, True) if args.synthesis else ():
        runs = measure_synthesis(tv, lams, "cpu", resident)
        rows.append(
            (
                f"synthesis θ0+Σλτ̃ alone, CPU, τ̃ {'in memory' if resident else 'from disk'}",
                statistics.median(runs),
                None,
                runs,
            )
        )
        gc.collect()
    if torch.cuda.is_available():
        for resident in (False, True):
            measure_synthesis(tv, lams[:1], "cuda", resident)  # warm-up
            runs = measure_synthesis(tv, lams, "cuda", resident)
            rows.append(
                (
                    f"synthesis θ0+Σλτ̃ alone, CUDA, τ̃ {'in memory' if resident else 'from disk'}",
                    statistics.median(runs),
                    None,
                    runs,
                )
            )
    else:
        print("no CUDA device on this machine: CUDA synthesis time not measured", flush=True)
    labels = {
        "memory": "synth_cache=memory",
        "memory_checkpoint": "synth_cache=memory (checkpoint layout, before #18)",
        "disk": "synth_cache=disk",
    }
    for kind in args.engines:
        res = measure_engine(kind, base, tv, lams, workdir, args)
        restart = statistics.median(res["restart"])
        for cache in modes(kind):
            swap = statistics.median(res[f"swap_{cache}"])
            label = labels[cache] + (" (each worker's parameters)" if kind == "vllm" and cache == "memory" else "")
            rows.append((f"{kind}: in-place swap_coefficients, {label}", swap, restart / swap, res[f"swap_{cache}"]))
        if kind == "vllm":
            for key, what in (
                ("resident_tp1", "parameters' layout, TP=1"),
                ("resident_checkpoint", "checkpoint layout (before), TP=1"),
            ):
                for rank in res[key]:
                    rows.append(
                        (f"vllm: resident bytes, GB, {what}, rank {rank['rank']}", rank["nbytes"] / 1e9, None, None)
                    )
        if kind == "vllm" and args.tp2:
            tp2 = measure_tp2(base, tv, lams, res["swapped"], args)
            one = res["resident_tp1"][0]["nbytes"]
            for rank in tp2["resident"]:
                rows.append(
                    (
                        f"vllm TP=2: resident bytes, GB, rank {rank['rank']} ({rank['nbytes'] / one:.2f} of TP=1)",
                        rank["nbytes"] / 1e9,
                        None,
                        None,
                    )
                )
            rows.append(
                (
                    "vllm TP=2: in-place swap_coefficients, synth_cache=memory",
                    statistics.median(tp2["swap"]),
                    restart / statistics.median(tp2["swap"]),
                    tp2["swap"],
                )
            )
            rows.append(("vllm TP=2: greedy output == TP=1 swap for every λ", float(all(tp2["match"])), None, None))
        rows.append(
            (
                f"{kind}: save + restart (write {statistics.median(res['restart_write']):.1f} s, "
                f"start {statistics.median(res['restart_start']):.1f} s)",
                restart,
                None,
                res["restart"],
            )
        )
        rows.append((f"{kind}: engine start with τ̃ loaded (once per run)", res["startup_once"], None, None))
        for cache in modes(kind):
            if res[f"warmup_{cache}"]:
                rows.append(
                    (
                        f"{kind}: warm-up swap(s), synth_cache={cache} (once per run, not timed above)",
                        statistics.median(res[f"warmup_{cache}"]),
                        None,
                        res[f"warmup_{cache}"],
                    )
                )
        rows.append((f"{kind}: greedy output of swap == restart for every λ", float(all(res["match"])), None, None))
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} CPUs (shared), torch {torch.__version__}")
    print(f"repeats: {args.repeats} (median), λ: {lams}\n")
    print("| measurement | median (s) | restart / swap | all runs (s) |\n|---|---|---|---|")
    for name, value, ratio, runs in rows:
        runs_txt = ", ".join(f"{r:.3f}" for r in runs) if runs else ""
        ratio_txt = f"{ratio:.0f}×" if ratio else ""
        print(f"| {name} | {value:.3f} | {ratio_txt} | {runs_txt} |")


if __name__ == "__main__":
    main()
