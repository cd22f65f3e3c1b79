"""The floors of benchmarks/swap/latency.py: the memory-traffic floor of one synthesis (compact vs
dense float32 τ̃), and the resident-forms table of #28 — each form of τ̃ on each engine, its swap
against its floor, its resident bytes, its start time and peak RSS, and (`--classes`) the
synthesis alone per tensor class."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.harness.floors import GB, memory_gbps, read_seconds, traffic_floor_s
from benchmarks.harness.memory import proc_gib
from benchmarks.harness.timing import swap_seconds
from benchmarks.swap.model import lambdas, make_engine
from dots.io.checkpoint import Checkpoint
from dots.runtime.timing import DeviceTimer
from dots.vectors.residency import tau_bytes_per_form

FORMS = ("dense", "sparse", "index", "bitmask")


def floors(base: Path, tv) -> list[tuple[str, float, None, None]]:
    """Memory-traffic floors of one synthesis, compact τ̃ vs dense float32 τ̃ (version 1)."""
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
                traffic_floor_s(traffic, memory),
                None,
                None,
            )
        )
        rows.append(
            (
                f"floor, τ̃ from the cache, {label}: + {(theta0 + tau) / GB:.2f} GB read at {warm_read:.1f} GB/s",
                traffic_floor_s(traffic, memory) + traffic_floor_s(theta0 + tau, warm_read),
                None,
                None,
            )
        )
    rows.append((f"τ̃ cache size, GB (dense float32 would be {dense / GB:.3f})", compact / GB, None, None))
    return rows


def classes_of_synthesis(tv, lams, forms) -> dict[str, dict[str, float]]:
    """Seconds of θ0 + Σλτ̃ written into live-like tensors, per resident form and tensor class
    (attention, mlp, embed_head, norm): medians over λ of `combine_into` per tensor, summed."""
    from dots.io.modules import module_group
    from dots.vectors import ResidentSynthesizer
    from dots.vectors.synth import combine_into

    out: dict[str, dict[str, float]] = {}
    for form in forms:
        rs = ResidentSynthesizer(tv, device="cpu", form=form)
        targets = {n: torch.empty_like(rs.theta0[n]) for n in rs.taus}
        scratch, fused = rs._scratch, rs._fused  # the swap's own buffers and compiled pass (if any)
        per: dict[str, list[float]] = {}
        for lam in lams:
            spent: dict[str, float] = {}
            for name in rs.taus:
                taus = [(rs.taus[name][k], v) for k, v in lam.items() if v != 0.0]
                with DeviceTimer(rs.device) as timer:
                    combine_into(targets[name], rs.theta0[name], taus, scratch, fused)
                group = module_group(name)
                spent[group] = spent.get(group, 0.0) + timer.seconds
            for group, seconds in spent.items():
                per.setdefault(group, []).append(seconds)
        out[form] = {g: statistics.median(v) for g, v in per.items()}
        del rs, targets
        gc.collect()
    return out


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
                times.append(swap_seconds(engine, lam))
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
    ckpt = Checkpoint(base)
    merged = sum(ckpt.info(n).nbytes for n in tv.names)
    taus = tau_bytes_per_form(tv)
    memory = memory_gbps(5)
    print(f"memory copy bandwidth (harness.floors.memory_gbps, median of 5): {memory:.1f} GB/s", flush=True)
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
        floor = traffic_floor_s(traffic, memory)
        swap = statistics.median(r["swap"])
        split = f"{r['write']:.3f} / {r['after']:.3f}" if "write" in r else ""
        own = ""
        if "write" in r and r.get("threads") in worker_gbps:
            own = f"{r['write'] / traffic_floor_s(traffic, worker_gbps[r['threads']]):.1f}× ({r['threads']} thread)"
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
