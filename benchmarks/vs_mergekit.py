"""Streaming merge (`python -m dots.merge`) vs mergekit: wall time, peak RSS, merged tensors.

    python benchmarks/vs_mergekit.py --sizes 0.5b 1.5b 3b --runs 5 --record
    python benchmarks/vs_mergekit.py --sizes 70b --layers 1 2 --methods ram ties --runs 3 --mergekit-runs 1

For each size, generates (benchmarks/gen_checkpoints.py) a Qwen2.5-shaped bf16 base +
"sft" (dense update) + "rlvr" (sparse update) trio with the real Qwen2.5-0.5B / 1.5B / 3B
widths and depths (`--noise finetune`), then for each method runs both tools `--runs`
times under `/usr/bin/time -v` (Debian package `time`), alternating which goes first in
each repeat, and reports medians of wall time and peak RSS, the ratios of the medians
(mergekit/dots wall = dots' speed-up; dots RSS / mergekit RSS) and the per-repeat paired
ratios. Sizes 7b and 70b are Qwen2.5-7B's and Llama-3-70B's widths (untied embedding and
lm_head) at the depth `--layers` gives (several values: one trio after the other, e.g.
`--layers 1 2` to see whether RSS grows with depth); `--mergekit-runs N` runs mergekit
only in the first N repeats (dots in all), and every run is watched by a memory guard
(`merge_memory.run_guarded`: `--mem-limit-gib` of anonymous RSS, `--min-available-gib`
of MemAvailable) that stops it, recorded as failed, before the machine runs out.
After the last repeat of each method the two outputs are compared tensor by tensor (read one
row chunk at a time): max |difference|, bit-identical share, share of
entries differing by more than one bf16 ulp of the larger magnitude, and — from the
inputs — the entries where the two definitions may disagree (below) and the number of
differing entries outside them, which must be 0. dare_ties is also run once at p = 0
(density 1), where its definition has no randomness, for the check.
`--record` appends the tables to benchmarks/RESULTS.md; `--out` gets every raw number.

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
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from merge_memory import TIME, parse_time_v, run_guarded  # noqa: E402

from dots.io.checkpoint import Checkpoint  # noqa: E402
from dots.vectors.topk import global_kth_largest  # noqa: E402

RESULTS = REPO / "benchmarks" / "RESULTS.md"
SIZES = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b", "3b": "qwen2.5-3b", "7b": "qwen2.5-7b", "70b": "llama3-70b"}
METHODS = ("task_arithmetic", "ties", "dare_ties", "ram", "ram_plus")
DEFAULT_METHODS = ("task_arithmetic", "ties", "dare_ties", "ram")
MERGEKIT_OPTIONS = "--lazy-unpickle --out-shard-size 500M --random-seed 0 --quiet"
SOURCES = ("sft", "rlvr")
CHUNK = 1 << 22  # entries compared at a time


@dataclass(frozen=True)
class Case:
    """One method configuration, expressed for both tools."""

    label: str
    dots_method: str
    dots_options: dict[str, Any]
    mk_method: str
    mk_shared: dict[str, Any]
    mk_per_model: dict[str, Any] = field(default_factory=dict)
    timed: bool = True  # False: one run, for the equality check only
    # which differences the definitions allow (see the docstring): "exact" none; "ties" entries tied at
    # a trim threshold or with a zero sign sum; "sign" entries with a zero sign sum; "random" any
    rule: str = "exact"
    density: float = 1.0  # the trim density of rule "ties"


@dataclass
class Run:
    tool: str
    case: str
    size: str
    repeat: int
    position: int  # 0: ran first in its repeat
    wall_s: float
    rss_gib: float
    load1: float  # 1-min load average at the start
    failed: str = ""  # why a mergekit run did not finish (e.g. "killed by signal 9"): its wall and RSS until then
    anon_gib: float = 0.0  # peak anonymous RSS seen by the memory guard (sampled every 0.25 s)


@dataclass
class Comparison:
    size: str
    case: str
    rule: str
    tensors: int
    entries: int
    identical: int
    over_ulp: int
    max_abs: float
    max_ulps: float
    worst_tensor: str
    dots_changed: int  # entries of dots' output that differ from the base
    mk_changed: int  # same for mergekit's
    allowed: int  # entries where the definitions may differ (rule of the case)
    unexplained: int | None  # entries that differ outside `allowed` (None: rule "random")
    only_in_one: list[str]


def build_cases(method: str, density: float, p: float) -> list[Case]:
    """The configurations of one method: dots options and the mergekit config that matches them."""
    one = {"weight": 1.0}
    if method == "task_arithmetic":
        return [Case(method, method, {"scale": 1.0}, method, {"lambda": 1.0, "normalize": False}, one)]
    if method == "ties":
        return [
            Case(
                f"ties (density {density:g})",
                method,
                {"density": density, "scale": 1.0},
                method,
                {"lambda": 1.0, "normalize": True, "int8_mask": True},
                {**one, "density": density},
                rule="ties",
                density=density,
            )
        ]
    if method == "dare_ties":
        return [dare_case(p, timed=True)] + ([dare_case(0.0, timed=False)] if p > 0 else [])
    if method == "ram":
        return [Case(method, method, {"epsilon": 1e-5}, "ram", {"epsilon": 1e-5})]
    if method == "ram_plus":
        return [
            Case(
                "ram_plus (tensor ρ) / ramplus_tl",
                method,
                {"r": 0.1, "alpha": 2.0, "epsilon": 1e-5, "scope": "tensor"},
                "ramplus_tl",
                {"r": 0.1, "alpha": 2.0, "epsilon": 1e-5},
            )
        ]
    raise ValueError(method)


def dare_case(p: float, timed: bool) -> Case:
    keep = round(1.0 - p, 12)
    return Case(
        f"dare_ties (p {p:g})",
        "dare_ties",
        {"p": p, "scale": 1.0},
        "dare_ties",
        {"lambda": round(1.0 / keep, 12), "normalize": True, "rescale": False, "int8_mask": True},
        {"weight": 1.0, "density": keep},
        timed=timed,
        rule="sign" if p == 0 else "random",
    )


# --- tools -----------------------------------------------------------------------------


def ensure_mergekit(venv: Path, spec: str) -> tuple[Path, dict[str, str]]:
    """DIR/bin/mergekit-yaml, creating the venv and installing `spec` into it when missing."""
    exe = venv / "bin" / "mergekit-yaml"
    if not exe.exists():
        print(f"creating {venv} and installing {spec} into it", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", spec], check=True)
    probe = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({k: m.version(k) for k in ('mergekit', 'torch', 'transformers', 'safetensors')}))"
    )
    versions = json.loads(
        subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True).stdout
    )
    return exe, versions


def dots_command(case: Case, root: Path, out: Path) -> list[str]:
    options = [f"method.{k}={v}" for k, v in case.dots_options.items()]
    return [
        sys.executable,
        "-m",
        "dots.merge",
        f"method={case.dots_method}",
        *options,
        f"backbone.base={root / 'base'}",
        *(f"+backbone.sources.{s}={root / s}" for s in SOURCES),
        f"output={out}",
        "overwrite=true",
    ]


def mergekit_config(case: Case, root: Path) -> dict[str, Any]:
    models = [
        {"model": str(root / s), **({"parameters": dict(case.mk_per_model)} if case.mk_per_model else {})}
        for s in SOURCES
    ]
    return {
        "merge_method": case.mk_method,
        "base_model": str(root / "base"),
        "models": models,
        "parameters": dict(case.mk_shared),
        "dtype": "float32",
        "out_dtype": "bfloat16",
    }


def mergekit_command(exe: Path, config: Path, out: Path, options: list[str]) -> list[str]:
    return [str(exe), str(config), str(out), *options]


GUARD: dict[str, float | None] = {"limit_gib": None, "min_available_gib": None}  # set from the command line


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str, float]:
    """(wall s, peak RSS GiB, "" or why it failed, peak anonymous RSS GiB) of one command under
    GNU time -v and the memory guard."""
    proc = run_guarded([TIME, "-v", *cmd], env=env, cwd=cwd, **GUARD)
    if proc.returncode == 0:
        return (*parse_time_v(proc.stderr), "", proc.peak_anon_gib)
    signal = re.search(r"Command terminated by signal (\d+)", proc.stderr)
    why = proc.stopped or (f"killed by signal {signal.group(1)}" if signal else f"exit code {proc.returncode}")
    if "Maximum resident set size" not in proc.stderr:
        raise SystemExit(f"failed ({why}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    print(f"failed ({why}): {shlex.join(cmd)}\n{proc.stderr[-1500:]}", flush=True)
    return (*parse_time_v(proc.stderr), why, proc.peak_anon_gib)


# --- equality --------------------------------------------------------------------------


def bf16_ulp(magnitude: torch.Tensor) -> torch.Tensor:
    """The bf16 ulp of each float32 magnitude: 2^(e−8) for x in [2^(e−1), 2^e)."""
    _, exponent = torch.frexp(magnitude)
    return torch.ldexp(torch.ones_like(magnitude), exponent - 8)


def row_chunks(ckpt: Checkpoint, name: str) -> Iterator[tuple[int, int]]:
    shape = ckpt.info(name).shape
    rows = shape[0] if shape else 1
    per_row = max(1, ckpt.info(name).numel // max(rows, 1))
    step = max(1, CHUNK // per_row)
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def delta_rows(name: str, base: Checkpoint, source: Checkpoint) -> Iterator[torch.Tensor]:
    for start, stop in row_chunks(base, name):
        yield (source.get_rows(name, start, stop).float() - base.get_rows(name, start, stop).float()).reshape(-1)


def trim_threshold(name: str, base: Checkpoint, source: Checkpoint, density: float) -> float:
    """dots' k-th largest |τ| (k = round(density·n)); 0 when everything is kept."""
    n = base.info(name).numel
    k = round(density * n)
    if k >= n:
        return 0.0
    if k <= 0:
        return float("inf")
    return global_kth_largest(lambda: delta_rows(name, base, source), k)[0]


def allowed_mask(rule: str, base: torch.Tensor, deltas: list[torch.Tensor], thresholds: list[float]) -> torch.Tensor:
    """Entries where the two definitions may disagree (rules "ties" and "sign").

    ties: an entry whose |τ_i| equals τ_i's trim threshold (> 0) may be kept by one tool and
    not the other (floor vs round k, unstable argsort vs lower index first); everywhere else
    both keep exactly the entries above the threshold. Then, with those trims, an entry whose
    kept values are not all zero but sum to exactly 0 is + in mergekit and 0 in dots.
    """
    tied = torch.zeros(base.shape, dtype=torch.bool)
    kept = []
    for delta, threshold in zip(deltas, thresholds if rule == "ties" else [0.0] * len(deltas)):
        magnitude = delta.abs()
        if threshold > 0:
            tied |= magnitude == threshold
        kept.append(delta * (magnitude > threshold))
    total = torch.stack(kept).sum(0)
    zero_sum = (total == 0) & torch.stack([k != 0 for k in kept]).any(0)
    return tied | zero_sum


def compare(size: str, case: Case, dots_dir: Path, mk_dir: Path, root: Path) -> Comparison:
    ours, theirs, base = Checkpoint(dots_dir), Checkpoint(mk_dir), Checkpoint(root / "base")
    sources = [Checkpoint(root / s) for s in SOURCES]
    common = [n for n in ours.names if n in theirs]
    only = sorted(set(ours.names) ^ set(theirs.names))
    result = Comparison(
        size,
        case.label,
        case.rule,
        len(common),
        0,
        0,
        0,
        0.0,
        0.0,
        "",
        0,
        0,
        0,
        None if case.rule == "random" else 0,
        only,
    )
    for name in common:
        if ours.info(name).shape != theirs.info(name).shape:
            raise SystemExit(
                f"{case.label}: {name} has shape {ours.info(name).shape} in dots' output, "
                f"{theirs.info(name).shape} in mergekit's"
            )
        thresholds = [trim_threshold(name, base, src, case.density) for src in sources] if case.rule == "ties" else []
        for start, stop in row_chunks(ours, name):
            a = ours.get_rows(name, start, stop).float()
            b = theirs.get_rows(name, start, stop).float()
            theta0 = base.get_rows(name, start, stop).float()
            diff = (a - b).abs()
            ulps = diff / bf16_ulp(torch.maximum(a.abs(), b.abs()))
            result.entries += a.numel()
            result.identical += int((a == b).sum())
            result.over_ulp += int((ulps > 1).sum())
            result.dots_changed += int((a != theta0).sum())
            result.mk_changed += int((b != theta0).sum())
            if diff.numel() and float(diff.max()) > result.max_abs:
                result.max_abs, result.worst_tensor = float(diff.max()), name
            if ulps.numel():
                result.max_ulps = max(result.max_ulps, float(ulps.nan_to_num(0.0).max()))
            if case.rule in ("ties", "sign"):
                deltas = [src.get_rows(name, start, stop).float() - theta0 for src in sources]
                allowed = allowed_mask(case.rule, theta0, deltas, thresholds)
                result.allowed += int(allowed.sum())
                result.unexplained += int(((a != b) & ~allowed).sum())
            elif case.rule == "exact":
                result.unexplained += int((a != b).sum())
    return result


# --- measurement -----------------------------------------------------------------------


def generate(root: Path, size: str, layers: int | None, vocab: int | None) -> None:
    if (root / "rlvr" / "config.json").exists() and (root / ".complete").exists():
        return  # kept by an earlier --keep run with the same root
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "gen_checkpoints.py"),
        "--shape",
        SIZES[size],
        "--dtype",
        "bfloat16",
        "--noise",
        "finetune",
        "--out",
        str(root),
    ]
    cmd += ["--layers", str(layers)] if layers else []
    cmd += ["--vocab", str(vocab)] if vocab else []
    subprocess.run(cmd, check=True)
    (root / ".complete").write_text(json.dumps(cmd))


def run_case(
    case: Case,
    size: str,
    root: Path,
    runs: int,
    exe: Path,
    mk_options: list[str],
    env: dict[str, str],
    mk_runs: int | None = None,
    keep: bool = True,
) -> tuple[list[Run], dict[str, Path]]:
    """`runs` paired repeats (order alternating; mergekit only in the first `mk_runs`, default
    all); the outputs of the last repeat each tool ran are kept (`keep`; else each output is
    deleted right after its run, so that one output at a time is on disk).

    A failed dots run ends the benchmark. A failed mergekit run (killed for memory, say) is
    recorded with its wall time and peak RSS until then, and mergekit is not run again for
    this case: the remaining repeats time dots alone."""
    config = root / f"mergekit-{case.mk_method}.yml"
    config.write_text(yaml.safe_dump(mergekit_config(case, root), sort_keys=False))
    outs = {"dots": root / "out-dots", "mergekit": root / "out-mergekit"}
    commands = {
        "dots": dots_command(case, root, outs["dots"]),
        "mergekit": mergekit_command(exe, config, outs["mergekit"], mk_options),
    }
    results: list[Run] = []
    for repeat in range(runs):
        order = ("dots", "mergekit") if repeat % 2 == 0 else ("mergekit", "dots")
        for position, tool in enumerate(order):
            if tool == "mergekit" and (any(r.failed for r in results) or (mk_runs is not None and repeat >= mk_runs)):
                continue
            shutil.rmtree(outs[tool], ignore_errors=True)
            load = os.getloadavg()[0]
            wall, rss, failed, anon = timed(commands[tool], env, root)
            if failed and tool == "dots":
                raise SystemExit(f"dots failed ({failed}): {shlex.join(commands[tool])}")
            results.append(Run(tool, case.label, size, repeat, position, wall, rss, load, failed, anon))
            if not keep:
                shutil.rmtree(outs[tool], ignore_errors=True)
            print(
                f"  {case.label:<28} repeat {repeat + 1} {tool:<8} wall {wall:7.1f} s  "
                f"peak RSS {rss:6.2f} GiB (anonymous {anon:5.2f})  (load {load:.1f})"
                f"{'  FAILED: ' + failed if failed else ''}",
                flush=True,
            )
    if any(r.failed for r in results):
        shutil.rmtree(outs["mergekit"], ignore_errors=True)
    return results, outs


def summarise(runs: list[Run]) -> dict[str, Any]:
    """Medians per tool, ratios of medians and per-repeat paired ratios of one case × size; where
    mergekit failed, dots' medians and mergekit's failed run ("mk_failed": why, wall, RSS)."""
    failed = [r for r in runs if r.failed]
    if failed:
        dots = [r for r in runs if r.tool == "dots"]
        return {
            "dots_wall": statistics.median(r.wall_s for r in dots),
            "dots_rss": statistics.median(r.rss_gib for r in dots),
            "runs": len(dots),
            "dots_rss_range": (min(r.rss_gib for r in dots), max(r.rss_gib for r in dots)),
            "mk_failed": (failed[0].failed, failed[0].wall_s, failed[0].rss_gib, failed[0].anon_gib),
        }
    by = {tool: sorted((r for r in runs if r.tool == tool), key=lambda r: r.repeat) for tool in ("dots", "mergekit")}
    med = {
        tool: (statistics.median(r.wall_s for r in rs), statistics.median(r.rss_gib for r in rs))
        for tool, rs in by.items()
    }
    wall_pairs = [m.wall_s / d.wall_s for d, m in zip(by["dots"], by["mergekit"])]
    rss_pairs = [d.rss_gib / m.rss_gib for d, m in zip(by["dots"], by["mergekit"])]
    return {
        "dots_wall": med["dots"][0],
        "mk_wall": med["mergekit"][0],
        "dots_rss": med["dots"][1],
        "mk_rss": med["mergekit"][1],
        "speedup": med["mergekit"][0] / med["dots"][0],
        "rss_ratio": med["dots"][1] / med["mergekit"][1],
        "wall_pairs": wall_pairs,
        "rss_pairs": rss_pairs,
        "runs": len(by["dots"]),
        "mk_runs": len(by["mergekit"]),
        "dots_rss_range": (min(r.rss_gib for r in by["dots"]), max(r.rss_gib for r in by["dots"])),
        "mk_anon": statistics.median(r.anon_gib for r in by["mergekit"]),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def timing_table(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    runs = any(s.get("mk_runs", s["runs"]) != s["runs"] or "mk_failed" in s for _, _, s in rows)
    lines = [
        "| size | method | dots wall (s) | mergekit wall (s) | mergekit/dots wall | dots peak RSS (GiB) "
        "| mergekit peak RSS (GiB) | dots/mergekit RSS | per-repeat mergekit/dots wall "
        "| per-repeat dots/mergekit RSS |" + (" runs dots / mergekit | dots RSS min–max |" if runs else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if runs else ""),
    ]
    for size, label, s in rows:
        extra = ""
        if runs:
            lo, hi = s["dots_rss_range"]
            extra = f" {s['runs']} / {s.get('mk_runs', 1 if 'mk_failed' in s else s['runs'])} | {lo:.2f}–{hi:.2f} |"
        if "mk_failed" in s:
            why, wall, rss, anon = s["mk_failed"]
            lines.append(
                f"| {size} | {label} | {s['dots_wall']:.1f} | failed ({why}) after {wall:.1f} | — "
                f"| {s['dots_rss']:.2f} | ≥ {rss:.2f} at failure (anonymous {anon:.2f}) | — | — | — |{extra}"
            )
            continue
        lines.append(
            f"| {size} | {label} | {s['dots_wall']:.1f} | {s['mk_wall']:.1f} | **{s['speedup']:.2f}** "
            f"| {s['dots_rss']:.2f} | {s['mk_rss']:.2f} | **{s['rss_ratio']:.2f}** "
            f"| {spread(s['wall_pairs'])} | {spread(s['rss_pairs'])} |{extra}"
        )
    return lines


def equality_table(comparisons: list[Comparison]) -> list[str]:
    lines = [
        "| size | method | tensors | entries | bit-identical | > 1 bf16 ulp | max \\|Δ\\| (ulps) | worst tensor "
        "| may differ by definition | differ elsewhere | ≠ base: dots / mergekit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        n = max(c.entries, 1)
        extra = f" (+{len(c.only_in_one)} in one output only)" if c.only_in_one else ""
        allowed = {"exact": "none", "random": "all (random masks)"}.get(c.rule, f"{c.allowed / n:.2e}")
        elsewhere = "—" if c.unexplained is None else f"{c.unexplained:,}"
        lines.append(
            f"| {c.size} | {c.case} | {c.tensors}{extra} | {c.entries:,} | {c.identical / n:.6f} "
            f"| {c.over_ulp / n:.2e} | {c.max_abs:.3g} ({c.max_ulps:.3g}) | {c.worst_tensor or '—'} "
            f"| {allowed} | {elsewhere} | {c.dots_changed / n:.3f} / {c.mk_changed / n:.3f} |"
        )
    return lines


def machine_description() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu}), {mem:.0f} GiB RAM, {platform.platform()}"


def record(
    args: argparse.Namespace,
    versions: dict[str, str],
    mk_options: list[str],
    date: str,
    rows: list[tuple[str, str, dict[str, Any]]],
    comparisons: list[Comparison],
    loads: list[float],
) -> None:
    command = shlex.join(["python", "benchmarks/vs_mergekit.py", *sys.argv[1:]])
    shape = "" if not (args.layers or args.vocab) else f" (overridden: layers {args.layers}, vocab {args.vocab})"
    big = [s for s in args.sizes if s in ("7b", "70b")]
    widths = (
        "the real Qwen2.5 widths and depths (tied embeddings, vocab 151936)"
        if not big
        else "; ".join(f"{s}: {SHAPE_TEXT[s]}" for s in args.sizes)
    )
    mk_runs = args.runs if args.mergekit_runs is None else min(args.runs, args.mergekit_runs)
    repeats = (
        f"Medians of {args.runs} runs per tool, the tools alternating first/second in each repeat"
        if mk_runs == args.runs
        else f"dots: medians of {args.runs} runs; mergekit: {mk_runs} run(s) (in the first repeat(s), after dots)"
    )
    guard = (
        f" Memory guard (`merge_memory.run_guarded`): a run is stopped when its anonymous RSS exceeds "
        f"{args.mem_limit_gib:g} GiB or MemAvailable falls below {args.min_available_gib:g} GiB."
    )
    text = [
        "",
        f"## Streaming merge vs mergekit {versions['mergekit']} (K=2, bf16) — {date}",
        "",
        f"Command: `{command}` (each run: `/usr/bin/time -v python -m dots.merge method=M method.KEY=V ... "
        "backbone.base=BASE +backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT overwrite=true` and "
        f"`/usr/bin/time -v mergekit-yaml CONFIG.yml OUT {shlex.join(mk_options)}`, config `dtype: float32`, "
        "`out_dtype: bfloat16`; the matching method parameters are in the script's docstring).",
        f"Machine: {args.machine or machine_description()}; torch {torch.__version__}; mergekit "
        f"{versions['mergekit']} in its own venv (torch {versions['torch']}, transformers {versions['transformers']}); "
        f"1-min load average at the start of the runs: {min(loads):.1f}–{max(loads):.1f}.",
        f"Checkpoints: benchmarks/gen_checkpoints.py `--shape SHAPE --dtype bfloat16 --noise finetune`{shape}: "
        f"{widths}, bf16; sft = base + dense noise "
        "(~90% of entries change in bf16), rlvr = base + sparse smaller noise (~8% change, half of them against "
        f"sft's sign). {repeats}; "
        f"ratios of medians and per-repeat paired ratios (median and range).{guard}",
        "",
        *timing_table(rows),
        "",
        "Merged tensors, dots vs mergekit (outputs of the last repeat; dare_ties also once at p = 0):",
        "",
        *(equality_table(comparisons) if comparisons else ["(not compared: `--no-compare`)"]),
        "",
        "Differences by definition (details in the script's docstring): task_arithmetic and ram are the same "
        "computation in both (no entry may differ); ties trims with a floor k and an unstable argsort at the "
        "threshold magnitude (dots: round(k), ties to the lower index) and elects + on an exact zero sign sum "
        "(dots: 0), so entries tied at a trim threshold or with a zero sign sum may differ; dare_ties draws its "
        "masks from another RNG (at p > 0 the outputs agree only in distribution) and at p = 0 may differ only "
        'where the sign sum is 0. "differ elsewhere" counts differing entries outside those sets.',
        "",
    ]
    with open(RESULTS, "a") as fh:
        fh.write("\n".join(text))


def save(
    args: argparse.Namespace,
    date: str,
    versions: dict[str, str],
    mk_options: list[str],
    runs: list[Run],
    rows: list[tuple[str, str, dict[str, Any]]],
    comparisons: list[Comparison],
) -> Path:
    """Every raw number so far into `--out` (rewritten after each case, so an interrupted run keeps them)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": sys.argv,
                "date": date,
                "machine": args.machine or machine_description(),
                "versions": versions,
                "dots_torch": torch.__version__,
                "mergekit_options": mk_options,
                "cases": [
                    {**asdict(c), "mergekit_config": mergekit_config(c, Path("ROOT"))}
                    for m in args.methods
                    for c in build_cases(m, args.density, args.p)
                ],
                "runs": [asdict(r) for r in runs],
                "summary": [{"size": s, "case": c, **v} for s, c, v in rows],
                "equality": [asdict(c) for c in comparisons],
            },
            indent=2,
        )
    )
    return args.out


SHAPE_TEXT = {
    "7b": "Qwen2.5-7B widths (hidden 3584, 28/4 heads, MLP 18944, untied 152064-token embedding and lm_head)",
    "70b": "Llama-3-70B widths (hidden 8192, 64/8 heads, MLP 28672, untied 128256-token embedding and lm_head)",
}


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
    parser.add_argument("--record", action="store_true", help="append the tables to benchmarks/RESULTS.md")
    parser.add_argument(
        "--out", type=Path, default=None, help="raw results JSON (default outputs/bench/vs_mergekit-DATE.json)"
    )
    parser.add_argument("--machine", default=None, help="machine description for RESULTS.md (default: detected)")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    if args.out is None:
        args.out = REPO / "outputs" / "bench" / f"vs_mergekit-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    if not Path(TIME).exists():
        raise SystemExit(f"{TIME} is missing: apt-get install time")
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
