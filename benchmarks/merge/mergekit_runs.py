"""The runs of benchmarks/merge/mergekit.py: each method as a case both tools can run, the two
commands, mergekit's own venv, a run under GNU time and the memory guard, the paired repeats of
a case (the tools alternating first) and their medians and ratios."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness.memory import time_guarded
from benchmarks.harness.trio import generate as generate_trio

SIZES = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b", "3b": "qwen2.5-3b", "7b": "qwen2.5-7b", "70b": "llama3-70b"}


SOURCES = ("sft", "rlvr")


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
    proc, wall, rss = time_guarded(cmd, env, cwd, **GUARD)
    if proc.returncode == 0:
        return wall, rss, "", proc.peak_anon_gib
    signal = re.search(r"Command terminated by signal (\d+)", proc.stderr)
    why = proc.stopped or (f"killed by signal {signal.group(1)}" if signal else f"exit code {proc.returncode}")
    if wall != wall:  # NaN: GNU time did not report
        raise SystemExit(f"failed ({why}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    print(f"failed ({why}): {shlex.join(cmd)}\n{proc.stderr[-1500:]}", flush=True)
    return wall, rss, why, proc.peak_anon_gib


def generate(root: Path, size: str, layers: int | None, vocab: int | None) -> None:
    if (root / "rlvr" / "config.json").exists() and (root / ".complete").exists():
        return  # kept by an earlier --keep run with the same root
    options = ["--shape", SIZES[size], "--dtype", "bfloat16", "--noise", "finetune"]
    options += ["--layers", str(layers)] if layers else []
    options += ["--vocab", str(vocab)] if vocab else []
    generate_trio(root, *options)
    (root / ".complete").write_text(json.dumps(options))


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
