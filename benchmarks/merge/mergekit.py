"""Streaming merge (`python -m dots.merge`) vs mergekit: wall time, peak RSS, merged tensors.

    python -m benchmarks.merge mergekit --sizes 0.5b 1.5b 3b --runs 5 --record
    python -m benchmarks.merge mergekit --sizes 70b --layers 1 2 --methods ram ties --runs 3 --mergekit-runs 1

For each size, generates (benchmarks/harness/generate.py) a Qwen2.5-shaped bf16 base +
"sft" (dense update) + "rlvr" (sparse update) trio with the real Qwen2.5-0.5B / 1.5B / 3B
widths and depths (`--noise finetune`), then for each method runs both tools `--runs`
times under `/usr/bin/time -v` (Debian package `time`), alternating which goes first in
each repeat, and reports medians of wall time and peak RSS, the ratios of the medians
(mergekit/dots wall = dots' speed-up; dots RSS / mergekit RSS) and the per-repeat paired
ratios. Sizes 7b and 70b are Qwen2.5-7B's and Llama-3-70B's widths (untied embedding and
lm_head) at the depth `--layers` gives (several values: one trio after the other, e.g.
`--layers 1 2` to see whether RSS grows with depth); `--mergekit-runs N` runs mergekit
only in the first N repeats (dots in all), and every run is watched by a memory guard
(`harness.memory.run_guarded`: `--mem-limit-gib` of anonymous RSS, `--min-available-gib`
of MemAvailable) that stops it, recorded as failed, before the machine runs out.
After the last repeat of each method the two outputs are compared tensor by tensor (read one
row chunk at a time): max |difference|, bit-identical share, share of
entries differing by more than one bf16 ulp of the larger magnitude, and — from the
inputs — the entries where the two definitions may disagree (below) and the number of
differing entries outside them, which must be 0. dare_ties is also run once at p = 0
(density 1), where its definition has no randomness, for the check.
`--record` appends the tables to benchmarks/results/merge.md; `--out` gets every raw number.

mergekit (PyPI `mergekit`, LGPL-3.0) is never a dependency of dots: it lives in its own
venv (`--mergekit-venv`, default outputs/bench-venvs/mergekit), created on first use with
`python -m venv --system-site-packages DIR && DIR/bin/pip install mergekit`. With the
system torch 2.13.0+cpu / transformers 5.19.0, mergekit 0.1.5 reuses both; pip adds only
accelerate, peft, immutables and a newer setuptools to the venv.

How the two are run
-------------------
dots:     python -m dots.merge method=M method.KEY=V ... backbone.base=BASE
          +backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT overwrite=true
mergekit: mergekit-yaml CONFIG.yml OUT --lazy-unpickle --out-shard-size 500M --random-seed 0 --quiet
          (no --cuda: both on CPU; `--mergekit-options` replaces this list). The low-memory
          choices: mergekit's TensorWriter keeps output tensors in memory until a shard of
          --out-shard-size bytes is full (default 5B = 5e9 bytes: the whole merged model
          up to 5 GB), so a user short of memory lowers it; --lazy-unpickle is mergekit's
          documented low-memory switch (it only affects pickled .bin inputs, so nothing
          here). The config sets `dtype: float32` (inputs cast to fp32 before merging) and
          `out_dtype: bfloat16`: dots' numerics (float32 task-vector arithmetic, result
          cast to the base dtype). Without `dtype`, mergekit computes in bf16, rounding
          τ and every partial sum to bf16 (less memory, different numbers).

Definitions: mergekit 0.1.5's source (merge_methods/generalized_task_arithmetic.py,
sparsify.py, ram.py) against dots (docs/method.md §5, dots/merge/methods/)
-------------------------------------------------------------------------------------
mergekit 0.1.5 registers arcee_fusion, breadcrumbs, breadcrumbs_ties, dare_linear,
dare_ties, della, della_linear, karcher, linear, model_stock, multislerp, nearswap,
nuslerp, passthrough, ram, ramplus_tl, sce, slerp, task_arithmetic and ties.

- task_arithmetic: mergekit θ0 + λ·Σ w_i τ_i (`normalize` default false; true would
  divide by Σ w_i). Config: weight 1, lambda 1 ↔ dots scale 1, weights 1. Same
  definition and, for K = 2, the same float32 additions: expect bit-identical output.
- ties: mergekit trims each τ_i to k = max(1, int(density·n)) entries (floor) chosen by
  `argsort(|τ|, descending)`, which is not stable, so among entries tied at the k-th
  magnitude the kept ones are arbitrary; dots keeps exactly k = round(density·n) with ties
  to the lower flat index. bf16 task vectors are differences of bf16 numbers, so their
  magnitudes are quantised and ties at the threshold are common: the two trims keep
  different (equally large) entries there, plus one entry more in dots where the
  fractional part of density·n is ≥ 0.5. Sign election: mergekit elects + where
  Σ_i w_i τ̂_i ≥ 0, so an exact zero sum (τ̂_1 = −τ̂_2 ≠ 0, again common with quantised
  bf16 deltas) keeps the positive entry; dots (the paper, sign(0) = 0) keeps neither
  and writes 0. Disjoint mean: mergekit `normalize: true` (the default for ties) divides
  by the summed weights of the agreeing entries = dots' disjoint mean. mergekit's density
  default is 1.0 (no trim); the config sets dots' 0.2. `int8_mask: true` only stores the
  sign mask as int8 (memory), results unchanged. (mergekit also has a `count` sign
  consensus in code; no registered method uses it.)
- dare_ties: mergekit drops with `torch.bernoulli(density)` from the global RNG
  (`--random-seed`); dots with a generator seeded by (tensor name, seed): the masks can
  never match, so p > 0 outputs agree only in distribution. mergekit's default `rescale:
  true` matches the L1 norm of each τ_i per tensor (‖τ‖₁/‖τ⊙m‖₁), not the DARE paper's
  1/(1−p) (dots); its default `normalize: false` sums the agreeing entries instead of
  averaging them (dots: disjoint mean, as ties). Config: density = 1−p, rescale false,
  normalize true, lambda = 1/(1−p): the disjoint mean of τ⊙m times 1/(1−p) = dots'
  mean of (τ⊙m)/(1−p). At p = 0 (density 1: mergekit skips the drop) both are TIES
  without trimming, so they agree except where the zero-sum sign rule above bites —
  more often than for ties, since nothing is trimmed.
- ram: mergekit `ram`: ε = 1e-5, changed = |τ| > ε, entries changed by one model keep
  its τ, entries changed by several get the mean over those models (÷ count, not ÷ K) =
  dots `ram` (r = 0; it needs no whole-model statistic). Expect bit-identical output.
  RAM+ differs: mergekit only has `ramplus_tl` ("tensor-local": ρ = shared/unique counted
  per tensor, ρ's denominator floored at ε, λ = 1 + r·clip(ρ, 0, α) with default α = 0.2),
  while the paper and dots' default count ρ over the whole model (`scope: global`,
  α = 2.0). `--methods ram_plus` compares dots' `scope: tensor` with `ramplus_tl` at the
  same r = 0.1, α = 2.0 (λ is float32 in mergekit, float64 then float32 in dots).
- Output files: both write a loadable directory (config.json, safetensors, README.md
  card); mergekit re-saves the config through transformers and adds a tokenizer and
  mergekit_config.yml. Only tensors are compared.

Peak RSS is GNU time's maximum resident set size. mergekit reads inputs through
safetensors' mmap, whose file pages it touches count as resident; dots reads into
private buffers. Both run with torch's default thread count.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from benchmarks.harness.results import REPO
from benchmarks.harness.timing import require_time
from benchmarks.merge.mergekit_equality import Comparison, compare, equality_table
from benchmarks.merge.mergekit_report import record, save, timing_table
from benchmarks.merge.mergekit_runs import (
    GUARD,
    SIZES,
    Run,
    build_cases,
    ensure_mergekit,
    generate,
    run_case,
    summarise,
)

METHODS = ("task_arithmetic", "ties", "dare_ties", "ram", "ram_plus")


DEFAULT_METHODS = ("task_arithmetic", "ties", "dare_ties", "ram")


MERGEKIT_OPTIONS = "--lazy-unpickle --out-shard-size 500M --random-seed 0 --quiet"


def size_label(size: str, layers: int | None) -> str:
    return size if layers is None else f"{size} ({layers} layer{'s' if layers != 1 else ''})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["0.5b", "1.5b", "3b"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
    parser.add_argument("--runs", type=int, default=5, help="repeats per tool, method and size")
    parser.add_argument("--density", type=float, default=0.2, help="ties: kept fraction of each task vector")
    parser.add_argument("--p", type=float, default=0.9, help="dare_ties: drop probability of the timed runs")
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-vs-mergekit"), help="generated checkpoints")
    parser.add_argument("--keep", action="store_true", help="keep generated checkpoints and outputs")
    parser.add_argument(
        "--mergekit-venv",
        type=Path,
        default=Path("outputs/bench-venvs/mergekit"),
        help="venv holding mergekit (relative to the repo root); created when missing",
    )
    parser.add_argument("--mergekit-spec", default="mergekit", help="what pip installs into a new venv")
    parser.add_argument("--mergekit-options", default=MERGEKIT_OPTIONS, help="mergekit-yaml options")
    parser.add_argument(
        "--layers",
        type=int,
        nargs="+",
        default=None,
        help="override the depth (smoke tests; 7b/70b shapes); several values: one trio each",
    )
    parser.add_argument(
        "--mergekit-runs", type=int, default=None, help="run mergekit only in the first N repeats (default: all --runs)"
    )
    parser.add_argument(
        "--mem-limit-gib", type=float, default=18.0, help="memory guard: stop a run whose anonymous RSS exceeds this"
    )
    parser.add_argument(
        "--min-available-gib",
        type=float,
        default=2.0,
        help="memory guard: stop a run when the machine's MemAvailable falls below this",
    )
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the tensor-by-tensor comparison (frees dots' output before mergekit runs)",
    )
    parser.add_argument("--vocab", type=int, default=None, help="override the vocabulary (smoke tests)")
    parser.add_argument("--record", action="store_true", help="append the tables to benchmarks/results/merge.md")
    parser.add_argument(
        "--out", type=Path, default=None, help="raw results JSON (default outputs/bench/vs_mergekit-DATE.json)"
    )
    parser.add_argument("--machine", default=None, help="machine description for RESULTS.md (default: detected)")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    if args.out is None:
        args.out = REPO / "outputs" / "bench" / f"vs_mergekit-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    require_time()
    venv = args.mergekit_venv if args.mergekit_venv.is_absolute() else REPO / args.mergekit_venv
    exe, versions = ensure_mergekit(venv, args.mergekit_spec)
    GUARD.update(limit_gib=args.mem_limit_gib, min_available_gib=args.min_available_gib)
    mk_options = shlex.split(args.mergekit_options)
    date = args.date or datetime.date.today().isoformat()
    print(f"mergekit {versions['mergekit']} ({exe}); options: {shlex.join(mk_options)}", flush=True)
    env = {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    runs: list[Run] = []
    rows: list[tuple[str, str, dict[str, Any]]] = []
    comparisons: list[Comparison] = []
    try:
        for size, layers in [(s, n) for s in args.sizes for n in (args.layers or [None])]:
            label = size_label(size, layers) if args.layers and len(args.layers) > 1 else size
            root = args.root / (size if layers is None else f"{size}-{layers}l")
            env.update(DOTS_OUTPUTS=str(root / "outputs"), DOTS_CACHE=str(root / "cache"))
            print(
                f"generating {SIZES[size]} (bf16{'' if layers is None else f', {layers} layers'}) under {root}",
                flush=True,
            )
            generate(root, size, layers, args.vocab)
            for method in args.methods:
                for case in build_cases(method, args.density, args.p):
                    if args.no_compare and not case.timed:
                        continue
                    case_runs, outs = run_case(
                        case,
                        label,
                        root,
                        args.runs if case.timed else 1,
                        exe,
                        mk_options,
                        env,
                        args.mergekit_runs,
                        keep=not args.no_compare,
                    )
                    runs += case_runs
                    if case.timed:
                        rows.append((label, case.label, summarise(case_runs)))
                    if outs["mergekit"].exists() and outs["dots"].exists() and not args.no_compare:
                        comparisons.append(compare(label, case, outs["dots"], outs["mergekit"], root))
                    save(args, date, versions, mk_options, runs, rows, comparisons)
                    if not args.keep:
                        for out in outs.values():
                            shutil.rmtree(out, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.root, ignore_errors=True)
    timing, equality = timing_table(rows), equality_table(comparisons)
    print("\n".join(["", *timing, "", *equality]))
    print(f"raw results: {save(args, date, versions, mk_options, runs, rows, comparisons)}")
    if args.record:
        record(args, versions, mk_options, date, rows, comparisons, [r.load1 for r in runs])


if __name__ == "__main__":
    main()
