"""The swap's combine, fused (`dots.vectors.fused`) against streaming, per resident form (#38).

For each form, one `ResidentSynthesizer` holds θ0 and the τ̃ of a generated model (the model and
cache of `swap_latency.py`) on `--device`, built with the fused pass (its compile-and-check time
is the start's); then, interleaved, `--repeats` swaps through the streaming combine and through
the fused pass, each written into live-like tensors as the transformers engine does. Per swap:
the time until the call returns and until the device is done (`dots.runtime.timing`; the same
on the CPU), against the memory-traffic floor — θ0 read + the output written + τ̃ read in that
form, over the device-copy bandwidth measured in the same run — and the memory the form holds
(CUDA: the peak allocated too). Last, the forms ordered by their faster path's time, against
`BY_SPEED`. Every fused swap's output is compared with the streaming one's, byte for byte.

    python -m benchmarks.swap fused --layers 24 --repeats 5                      # Qwen2.5-0.5B shapes
    python -m benchmarks.swap fused --shape qwen2.5-7b --layers 2 --device cuda  # #38's table
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from benchmarks.harness import generate as gen_checkpoints
from benchmarks.swap import latency as swap_latency
from dots.io.checkpoint import Checkpoint
from dots.runtime.timing import DeviceTimer, wait_for
from dots.vectors.forms import BY_SPEED
from dots.vectors.residency import tau_bytes_per_form
from dots.vectors.synth import ResidentSynthesizer

GB = 1e9


def device_gbps(device: torch.device, runs: int = 5) -> float:
    """Bandwidth of a 1 GiB float32 copy on `device` (GB/s, bytes read + written), median of `runs`."""
    src = torch.ones(2**28, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(runs):
        with DeviceTimer(device) as t:
            dst.copy_(src)
        times.append(t.seconds)
    del src, dst
    return 2 * 2**28 * 4 / statistics.median(times) / GB


def one_swap(rs: ResidentSynthesizer, lam: dict, targets: dict) -> tuple[float, float]:
    """(call returns, device done) seconds of one swap written into `targets`."""
    wait_for(rs.device)
    start = time.perf_counter()
    for _ in rs(lam, into=targets):
        pass
    returned = time.perf_counter() - start
    wait_for(rs.device)
    return returned, time.perf_counter() - start


def measure_form(tv, form: str, device: torch.device, lams: list[dict], warm: list[dict]) -> dict:
    """Streaming and fused swaps of one form, interleaved (`warm` first, untimed); their outputs
    compared byte for byte."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    began = time.perf_counter()
    rs = ResidentSynthesizer(tv, device=device, form=form, fused=True)
    start_s, fused = time.perf_counter() - began, rs._fused
    targets = {n: torch.empty_like(t) for n, t in rs.theta0.items()}
    out = {"form": form, "start": start_s, "compile": rs.fused["compile_s"], "held": rs.nbytes, "same": True}
    times: dict[str, list[tuple[float, float]]] = {"streaming": [], "fused": []}
    warmup = len(warm)
    for i, lam in enumerate(warm + lams):
        got = {}
        for path in ("streaming", "fused"):
            rs._fused = fused if path == "fused" else None
            timing = one_swap(rs, lam, targets)
            if i >= warmup:
                times[path].append(timing)
            got[path] = {n: t.clone() for n, t in targets.items()} if i == warmup else None
        if got["fused"] is not None:
            out["same"] = all(
                torch.equal(got["fused"][n].view(torch.uint8), t.view(torch.uint8)) for n, t in got["streaming"].items()
            )
    out["fused_on"] = rs.fused["fused"]
    for path, runs in times.items():
        out[path] = {"returns": statistics.median(r for r, _ in runs), "done": statistics.median(d for _, d in runs)}
        out[path]["all"] = [round(d, 4) for _, d in runs]
    if device.type == "cuda":
        out["peak"] = torch.cuda.max_memory_allocated(device)
    del rs, targets, fused
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dots-swap"))
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--forms", nargs="+", default=list(BY_SPEED), choices=BY_SPEED)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", choices=sorted(gen_checkpoints.SHAPES), help="another model's widths")
    parser.add_argument("--vocab", type=int, help="with --shape: a smaller vocabulary (smoke runs)")
    parser.add_argument("--threads", type=int, help="torch threads (CPU)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    workdir = args.workdir / f"l{args.layers}"
    if args.shape:
        swap_latency.SHAPE = gen_checkpoints.SHAPES[args.shape]
        if args.vocab:
            swap_latency.SHAPE = dataclasses.replace(swap_latency.SHAPE, vocab=args.vocab)
        workdir = args.workdir / f"{args.shape}-v{swap_latency.SHAPE.vocab}-l{args.layers}"
    base, tv = swap_latency.build(workdir, args.layers)
    ckpt = Checkpoint(base)
    merged = sum(ckpt.info(n).nbytes for n in tv.names)
    params = sum(ckpt.info(n).numel for n in ckpt.names)
    taus = tau_bytes_per_form(tv, ckpt)
    device = torch.device(args.device)
    gbps = device_gbps(device)
    lams = swap_latency.lambdas(args.repeats)
    warm = swap_latency.lambdas(args.warmup, seed=1)
    rows = []
    for form in args.forms:
        row = measure_form(tv, form, device, lams, warm)
        row["floor"] = (2 * merged + taus[form]) / GB / gbps
        rows.append(row)
        print(f"[{form}] {json.dumps(row)}", flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(
        f"\n{params / 1e6:,.0f} M parameters (bf16), {device} ({name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs; device copy {gbps:.1f} GB/s; "
        f"medians of {args.repeats} after {args.warmup} warm-up; λ {lams}\n"
    )
    print(
        "| form | path | call returns (s) | device done (s) | floor (s) | × floor | resident (GB) | peak (GB) "
        "| start, of it compiling (s) | all (s) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        peak = f"{r['peak'] / GB:.2f}" if "peak" in r else ""
        for path in ("streaming", "fused"):
            p = r[path]
            start = f"{r['start']:.1f}, {r['compile']:.1f}" if path == "fused" else ""
            print(
                f"| {r['form']} | {path} | {p['returns']:.4f} | {p['done']:.4f} | {r['floor']:.4f} | "
                f"{p['done'] / r['floor']:.1f}× | {r['held'] / GB:.2f} | {peak} | {start} | "
                f"{', '.join(map(str, p['all']))} |"
            )
    best = {r["form"]: min(r["streaming"]["done"], r["fused"]["done"]) for r in rows}
    order = sorted(best, key=lambda f: best[f])
    print(
        f"\nfused bytes == streaming bytes: {all(r['same'] for r in rows)}; "
        f"fused pass kept on: {[r['fused_on'] for r in rows]}"
    )
    print(
        f"forms by the faster path's swap: {', '.join(order)}; BY_SPEED: {', '.join(f for f in BY_SPEED if f in best)}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"device": str(device), "name": name, "gbps": gbps, "rows": rows, "order": order}, indent=1)
        )


if __name__ == "__main__":
    main()
