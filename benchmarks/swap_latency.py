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

    python benchmarks/swap_latency.py --workdir /tmp/dots-swap --engines vllm hf --repeats 5

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
written, over the memory bandwidth `machine_limits.memory_gbps` measures in the same run), with
the resident bytes; one plain start (no τ̃) beside them. `--classes` adds the synthesis alone
per tensor class:

    python benchmarks/swap_latency.py --layers 24 --repeats 5 --engines hf vllm --enforce-eager \
        --forms dense sparse index bitmask --classes

The table also gives the τ̃ cache's size (compact since cache version 2: θ_i's values at the
mask plus a bitmask or positions; dense float32 τ⊙M before) and the memory-traffic floor of
one synthesis: the bytes it must move — θ0 read, τ̃ read, the output written — over this
machine's memory-copy bandwidth (`machine_limits.memory_gbps`); with `synth_cache=disk`, the
same plus θ0 and τ̃ read from the page cache at its measured rate (`machine_limits.read_seconds`).
Both for the compact τ̃ and for the dense float32 τ̃ of cache version 1 (4 bytes per parameter).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_checkpoints  # noqa: E402
from gen_checkpoints import HEADS, HIDDEN, KV_HEADS, MLP, VOCAB, layer_shapes  # noqa: E402  (Qwen2-0.5B widths)

from dots.io.checkpoint import Checkpoint  # noqa: E402
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.keys import name_seed  # noqa: E402
from dots.runtime.allocator import return_freed_memory, reuse_freed_memory  # noqa: E402
from dots.runtime.timing import DeviceTimer, device_of  # noqa: E402
from dots.vectors.residency import tau_bytes_per_form  # noqa: E402

PROMPT = "Question: what is 12 + 30? Answer:"


SHAPE: gen_checkpoints.Shape | None = None  # --shape: another model's widths (None: Qwen2.5-0.5B's)


def model_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    if SHAPE is not None:
        return gen_checkpoints.model_shapes(layers, SHAPE)
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        shapes.update(layer_shapes(i))
    shapes["model.norm.weight"] = (HIDDEN,)
    return shapes


def write_tokenizer(out: Path) -> None:
    """Printable characters, specials and filler tokens up to the model's vocabulary size."""
    if SHAPE is not None:
        return gen_checkpoints.write_tokenizer(out, SHAPE.vocab)
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = sorted(set(string.printable[:95] + "\n"))
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    for i in range(len(vocab), VOCAB):
        vocab[f"<x{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out)


def write_model(out: Path, layers: int, source_seed: int | None, scale: float, density: float) -> Path:
    """Base weights seeded by tensor name; a source adds seeded noise on a `density` share."""
    if (out / "config.json").exists():
        return out
    shapes = model_shapes(layers)
    plan = {n: TensorInfo(s, torch.bfloat16) for n, s in shapes.items()}
    with CheckpointWriter(out, plan, max_shard_bytes=2 * 2**30) as writer:
        for name, shape in shapes.items():
            gen = torch.Generator().manual_seed(name_seed(name, 0))
            t = torch.randn(shape, generator=gen).mul_(0.02)
            if len(shape) == 1 and "norm" in name:
                t.add_(1.0)
            if source_seed is not None:
                gen = torch.Generator().manual_seed(name_seed(name, source_seed))
                noise = torch.randn(shape, generator=gen).mul_(scale)
                if density < 1:
                    noise.mul_(torch.rand(shape, generator=gen) < density)
                t.add_(noise)
            writer.write(name, t)
        config = {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": HIDDEN,
            "intermediate_size": MLP,
            "num_hidden_layers": layers,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "hidden_act": "silu",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "use_sliding_window": False,
            "max_window_layers": layers,
        }
        if SHAPE is not None:
            config = {
                **gen_checkpoints.config(layers, SHAPE, torch.bfloat16, tokenizer=True),
                "max_position_embeddings": 4096,
            }
        writer.add_file("config.json", json.dumps(config, indent=2))
        writer.add_file("generation_config.json", json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
        path = writer.commit()
    write_tokenizer(path)
    return path


def build(workdir: Path, layers: int):
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    base = write_model(workdir / "base", layers, None, 0.0, 1.0)
    sft = write_model(workdir / "sft", layers, 1, 2e-3, 1.0)
    rl = write_model(workdir / "rlvr", layers, 2, 5e-4, 0.2)
    for path in (base, sft, rl):
        if not (path / "tokenizer.json").exists():  # an earlier run stopped right after commit
            write_tokenizer(path)
    tv = build_task_vectors(
        Checkpoint(base),
        {"sft": Checkpoint(sft), "rlvr": Checkpoint(rl)},
        SparsifyConfig(density=0.3),
        workdir / "cache",
    )
    return base, tv


def lambdas(n: int, seed: int = 0) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [{"sft": round(rng.uniform(0, 2), 3), "rlvr": round(rng.uniform(0, 2), 3)} for _ in range(n)]


def save_merged(tv, coefficients, base: Path, out: Path) -> Path:
    from dots.vectors.synth import synthesize

    ckpt = Checkpoint(base)
    with CheckpointWriter(
        out, {n: ckpt.info(n) for n in ckpt.names}, max_shard_bytes=2 * 2**30, overwrite=True
    ) as writer:
        writer.write_all(synthesize(tv, coefficients, device="cpu", base=ckpt))
        return writer.commit(copy_from=ckpt)


def make_engine(kind: str, model: Path, tv=None, args=None, synth_cache: str = "disk", resident_form: str = "auto"):
    if kind == "vllm":
        from dots.engines.vllm.engine import VLLMEngine

        return VLLMEngine(
            model,
            task_vectors=tv,
            dtype="bfloat16",
            max_model_len=512,
            synth_cache=synth_cache,
            resident_form=resident_form,
            enforce_eager=args.enforce_eager,
            gpu_memory_utilization=args.memory_utilization,
        )
    from dots.engines.hf import HFEngine

    return HFEngine(model, task_vectors=tv, dtype="bfloat16", synth_cache=synth_cache, resident_form=resident_form)


def greedy(engine) -> str:
    return engine.generate([PROMPT], max_tokens=8)[0][0]


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
            with DeviceTimer(device_of(engine)) as t:
                engine.swap_coefficients(lam)
            out[f"warmup_{cache}"].append(t.seconds)
            print(f"[{kind}] warm-up swap ({cache}) {lam}: {out[f'warmup_{cache}'][-1]:.3f} s", flush=True)
        for i, lam in enumerate(lams):
            with DeviceTimer(device_of(engine)) as t:
                engine.swap_coefficients(lam)
            out[f"swap_{cache}"].append(t.seconds)
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
        task_vectors=tv,
        dtype="bfloat16",
        max_model_len=512,
        synth_cache="memory",
        tensor_parallel_size=2,
        enforce_eager=args.enforce_eager,
        gpu_memory_utilization=args.memory_utilization,
    )
    out: dict = {"startup": time.perf_counter() - t, "resident": engine.resident_info(), "swap": [], "match": []}
    print(f"[vllm TP=2] resident: {out['resident']}", flush=True)
    try:
        for lam in lambdas(args.warmup, seed=1):
            engine.swap_coefficients(lam)
        for lam, want in zip(lams, expected):
            with DeviceTimer(device_of(engine)) as t:
                engine.swap_coefficients(lam)
            out["swap"].append(t.seconds)
            out["match"].append(greedy(engine) == want)
            print(f"[vllm TP=2] swap {lam}: {out['swap'][-1]:.3f} s, output == TP=1: {out['match'][-1]}", flush=True)
    finally:
        engine.close()
    return out


def measure_synthesis(tv, lams, device: str, resident: bool = False) -> list[float]:
    from dots.vectors.synth import ResidentSynthesizer, synthesize

    make = ResidentSynthesizer(tv, device=device) if resident else (lambda lam: synthesize(tv, lam, device=device))
    times = []
    for lam in lams:
        with DeviceTimer(device) as t:
            for _, tensor in make(lam):
                del tensor
        times.append(t.seconds)
    return times


def floors(base: Path, tv) -> list[tuple[str, float, None, None]]:
    """Memory-traffic floors of one synthesis, compact τ̃ vs dense float32 τ̃ (version 1)."""
    from machine_limits import GB, memory_gbps, read_seconds

    ckpt = Checkpoint(base)
    merged = sum(ckpt.info(n).nbytes for n in tv.names)
    theta0 = sum(ckpt.info(n).nbytes for n in ckpt.names)
    compact = sum(entry.nbytes for entry in tv.entries.values())
    dense = 4 * sum(ckpt.info(n).numel for n in tv.names) * len(tv.entries)
    files = sorted(p for e in tv.entries.values() for p in e.path.glob("*.safetensors"))
    files += sorted(base.glob("*.safetensors"))
    read_seconds(files)
    warm_read = (compact + theta0) / min(read_seconds(files) for _ in range(3)) / GB  # page cache GB/s
    memory = memory_gbps(3)
    print(
        f"τ̃ cache: {compact / GB:.3f} GB compact (dense float32: {dense / GB:.3f} GB); "
        f"memory copy {memory:.1f} GB/s, page-cache read {warm_read:.1f} GB/s",
        flush=True,
    )
    rows = []
    for label, tau in (("compact τ̃", compact), ("dense float32 τ̃ (cache v1)", dense)):
        traffic = theta0 + tau + merged
        rows.append(
            (
                f"floor, τ̃ in memory, {label}: {traffic / GB:.2f} GB moved at {memory:.1f} GB/s",
                traffic / GB / memory,
                None,
                None,
            )
        )
        rows.append(
            (
                f"floor, τ̃ from the cache, {label}: + {(theta0 + tau) / GB:.2f} GB read at {warm_read:.1f} GB/s",
                traffic / GB / memory + (theta0 + tau) / GB / warm_read,
                None,
                None,
            )
        )
    rows.append((f"τ̃ cache size, GB (dense float32 would be {dense / GB:.3f})", compact / GB, None, None))
    return rows


FORMS = ("dense", "sparse", "index", "bitmask")


def classes_of_synthesis(tv, lams, forms) -> dict[str, dict[str, float]]:
    """Seconds of θ0 + Σλτ̃ written into live-like tensors, per resident form and tensor class
    (attention, mlp, embed_head, norm): medians over λ of `combine_into` per tensor, summed."""
    from dots.io.modules import module_group
    from dots.vectors.synth import ResidentSynthesizer, combine_into

    out: dict[str, dict[str, float]] = {}
    for form in forms:
        rs = ResidentSynthesizer(tv, device="cpu", form=form)
        targets = {n: torch.empty_like(rs.theta0[n]) for n in rs.taus}
        per: dict[str, list[float]] = {}
        for lam in lams:
            spent: dict[str, float] = {}
            for name in rs.taus:
                taus = [(rs.taus[name][k], v) for k, v in lam.items() if v != 0.0]
                with DeviceTimer(rs.device) as t:
                    combine_into(targets[name], rs.theta0[name], taus, rs._scratch, rs._fused)
                group = module_group(name)
                spent[group] = spent.get(group, 0.0) + t.seconds
            for group, seconds in spent.items():
                per.setdefault(group, []).append(seconds)
        out[form] = {g: statistics.median(v) for g, v in per.items()}
        del rs, targets
        gc.collect()
    return out


def proc_gib(pid: int, field: str) -> float:
    """A /proc/<pid>/status memory field (VmRSS, VmHWM) in GiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def gib(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def start_engine(kind: str, base: Path, tv, args, form: str | None) -> tuple:
    """A fresh engine, τ̃ resident in `form` (None: a plain start, no τ̃): (engine, start s,
    peak RSS GiB of vLLM's worker — a fresh process: its VmHWM; None for the transformers
    engine, which lives in this process beside what earlier engines freed)."""
    t = time.perf_counter()
    if form is None:
        engine = make_engine(kind, base, None, args)
    else:
        engine = make_engine(kind, base, tv, args, synth_cache="memory", resident_form=form)
    seconds = time.perf_counter() - t
    peak = proc_gib(int(engine.worker_info()[0]["pid"]), "VmHWM") if kind == "vllm" else None
    return engine, seconds, peak


def measure_forms(kind: str, base: Path, tv, lams, args) -> list[dict]:
    """Per form, a fresh engine of `kind` started with τ̃ resident in it (start time and the
    weight-holding process's peak RSS), `--warmup` untimed swaps, then one timed swap per λ;
    the resident bytes each form holds; vLLM: the worker's own split of each swap (writing
    the parameters, post-load processing). One plain start (no τ̃) first, for reference."""
    engine, seconds, peak = start_engine(kind, base, tv, args, None)
    engine.close()
    del engine
    gc.collect()
    print(f"[{kind}] plain engine start {seconds:.1f} s, peak RSS {peak} GiB", flush=True)
    rows = [{"engine": kind, "form": "plain start (no τ̃)", "swap": [], "held": 0, "setup": seconds, "peak": peak}]
    for form in args.forms:
        engine, seconds, peak = start_engine(kind, base, tv, args, form)
        try:
            info = engine.resident_info()
            ranks = info if isinstance(info, list) else [info]
            held = sum(int(r["nbytes"]) for r in ranks)
            assert all(r["form"] == form for r in ranks), ranks
            for lam in lambdas(args.warmup, seed=1):
                engine.swap_coefficients(lam)
            times, split = [], []
            for lam in lams:
                with DeviceTimer(device_of(engine)) as t:
                    engine.swap_coefficients(lam)
                times.append(t.seconds)
                if kind == "vllm":  # the worker's own split: writing the parameters, post-load processing
                    split.append(engine.resident_info()[0].get("last_swap", {}))
            row = {"engine": kind, "form": form, "swap": times, "held": held}
            row.update(setup=seconds, peak=peak)
            if kind == "vllm":
                worker = engine.resident_info()[0]
                row["threads"] = worker.get("torch_threads")
                steps = worker.get("set_up_s", {})
                print(f"[vllm] {form}: set-up steps (s) { ({k: round(v, 1) for k, v in steps.items()}) }", flush=True)
            if split and all(split):
                row["write"] = statistics.median(x["write_s"] for x in split)
                row["after"] = statistics.median(x["after_load_s"] for x in split)
            swaps = [round(x, 3) for x in times]
            split_s = f"{row.get('write')} / {row.get('after')}"
            print(
                f"[{kind}] {form}: start {seconds:.1f} s, peak {peak} GiB, swaps {swaps}, {split_s}",
                flush=True,
            )
            rows.append(row)
        finally:
            engine.close()
            gc.collect()
    return rows


def forms_table(base: Path, tv, lams, args) -> None:
    """The table of #28: form × engine × swap × memory-traffic floor × ratio × resident bytes."""
    from machine_limits import GB, memory_gbps

    ckpt = Checkpoint(base)
    merged = sum(ckpt.info(n).nbytes for n in tv.names)
    taus = tau_bytes_per_form(tv)
    memory = memory_gbps(5)
    print(f"memory copy bandwidth (machine_limits.memory_gbps, median of 5): {memory:.1f} GB/s", flush=True)
    rows = []
    for kind in args.engines:
        rows += measure_forms(kind, base, tv, lams, args)
    classes = classes_of_synthesis(tv, lams, args.forms) if args.classes else {}
    threads = {r["threads"] for r in rows if r.get("threads")}
    worker_gbps = {t: memory_gbps(5, threads=t) for t in sorted(threads)}  # vLLM-CPU: the worker's thread count
    for t, gbps in worker_gbps.items():
        print(f"memory copy bandwidth on {t} torch thread(s): {gbps:.1f} GB/s", flush=True)
    print(
        f"\nmachine: {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads; medians of {len(lams)}; λ: {lams}\n"
    )
    print(
        "| form | engine | swap (s) | floor (s) | swap ÷ floor | in the worker: write / post-load (s) "
        "| write ÷ floor at the worker's threads "
        "| resident bytes (GB) | engine start (s) | peak RSS (GiB) | all swaps (s) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if not r["swap"]:  # the plain start
            print(f"| {r['form']} | {r['engine']} | | | | | | | {r['setup']:.1f} | {gib(r['peak'])} | |")
            continue
        form = r["form"].split(" ")[0]
        traffic = 2 * merged + taus[form]  # θ0 read + τ̃ read + the parameters written
        floor = traffic / GB / memory
        swap = statistics.median(r["swap"])
        split = f"{r['write']:.3f} / {r['after']:.3f}" if "write" in r else ""
        own = ""
        if "write" in r and r.get("threads") in worker_gbps:
            own = f"{r['write'] / (traffic / GB / worker_gbps[r['threads']]):.1f}× ({r['threads']} thread)"
        print(
            f"| {r['form']} | {r['engine']} | {swap:.3f} | {floor:.3f} | {swap / floor:.1f}× | {split} | {own} | "
            f"{r['held'] / GB:.3f} | {r['setup']:.1f} | {gib(r['peak'])} | {', '.join(f'{x:.3f}' for x in r['swap'])} |"
        )
    print(
        f"\nfloor = (θ0 of the merged tensors {merged / GB:.3f} GB + τ̃ in the form + the parameters written "
        f"{merged / GB:.3f} GB) / {memory:.1f} GB/s; τ̃: " + ", ".join(f"{f} {taus[f] / GB:.3f} GB" for f in FORMS)
    )
    if classes:
        groups = sorted({g for per in classes.values() for g in per})
        print("\nsynthesis alone into live-like tensors, per tensor class (s, medians):\n")
        print("| form | " + " | ".join(groups) + " | total |\n|---|" + "---:|" * (len(groups) + 1))
        for form, per in classes.items():
            cells = " | ".join(f"{per.get(g, 0.0):.3f}" for g in groups)
            print(f"| {form} | {cells} | {sum(per.values()):.3f} |")


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
    parser.add_argument(
        "--shape", choices=sorted(gen_checkpoints.SHAPES), help="another model's widths (qwen2.5-7b); default 0.5B's"
    )
    parser.add_argument("--vocab", type=int, help="with --shape: a smaller vocabulary (smoke tests)")
    args = parser.parse_args()
    os.environ.setdefault("DOTS_PROGRESS", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM-CPU's default share does not fit here
    global SHAPE
    workdir = args.workdir / f"l{args.layers}"
    if args.shape:
        SHAPE = gen_checkpoints.SHAPES[args.shape]
        if args.vocab:
            SHAPE = dataclasses.replace(SHAPE, vocab=args.vocab)
        workdir = args.workdir / f"{args.shape}-v{SHAPE.vocab}-l{args.layers}"
    t = time.perf_counter()
    base, tv = build(workdir, args.layers)
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
