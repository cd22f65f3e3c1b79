"""The two sides of benchmarks/search/restart.py: a dots search run under GNU time (its τ̃ cache
and selection prepared once, outside the timing), and the save-and-restart replay of its trials
in a process of its own; their trials and the objectives both sides reached."""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from benchmarks.harness.entry import module_command
from benchmarks.harness.lab import lab_backbone
from benchmarks.harness.timing import TIME, parse_time_v

SCORE_PARTS = ("swap", "generate", "consistency", "perplexity")


@dataclass
class SideRun:
    """One side of one repeat."""

    side: str  # dots | restart
    repeat: int
    position: int  # 0: ran first in its repeat
    load1: float  # 1-min load average at its start
    wall_s: float  # the whole process (GNU time)
    rss_gib: float  # its peak RSS (GNU time; the largest process of the tree)
    trials_s: float  # dots: study span (incl. its engine start); restart: Σ per-trial totals
    trials: list[dict[str, Any]] = field(default_factory=list)  # per trial: number, λ, objectives, times


def search_args(models: Mapping[str, Path], args: argparse.Namespace, run_dir: Path, trials: int) -> list[str]:
    """The lab backbone with its trio pinned, a given run dir and cache, no export."""
    return [
        *lab_backbone(dict(models), args.engine),
        f"search.n_trials={trials}",
        "export.enabled=false",
        f"run_dir={run_dir}",
        f"cache_dir={args.root / 'cache'}",
        *args.set,
    ]


def run_timed(cmd: list[str], env: Mapping[str, str], log: Path, cwd: Path) -> tuple[float, float]:
    """(wall s, peak RSS GiB) of one command under GNU time -v; its output goes to `log`."""
    timing = log.with_suffix(".time")
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [TIME, "-v", "-o", str(timing), *cmd],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        try:
            code = proc.wait()
        except BaseException:  # interrupted: stop its whole process group (vLLM's engine processes too)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            raise
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"failed ({code}): {shlex.join(cmd)}\n{tail}")
    return parse_time_v(timing.read_text())


def read_trials(run_dir: Path) -> list[dict[str, Any]]:
    """The complete trials of trials.csv in trial order, numbers parsed."""

    def value(text: str) -> Any:
        try:
            return float(text) if text else None
        except ValueError:
            return text

    with open(run_dir / "trials.csv", newline="") as fh:
        rows = [{k: value(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    rows = [r for r in rows if r["state"] == "COMPLETE"]
    for row in rows:
        row["number"] = int(row["number"])
    return sorted(rows, key=lambda r: r["number"])


def study_span(run_dir: Path) -> float:
    """First trial start → last trial complete, from the run's study.db."""
    import optuna
    from optuna.trial import TrialState

    from dots.search.study.storage import open_storage

    storage = open_storage(None, run_dir)
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,)
    )
    return (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()


def prepare(models: Mapping[str, Path], args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    """τ̃ cache and selection (a 1-trial dots run), then one untimed restart: outside every timing."""
    key = hashlib.sha256(json.dumps([args.engine, args.set, {k: str(v) for k, v in models.items()}]).encode())
    prep = args.root / f"prep-{args.engine}-{key.hexdigest()[:8]}"
    if not (prep / "trials.csv").exists():
        print(f"prep: task vectors and selection in {prep}", flush=True)
        prep.mkdir(parents=True, exist_ok=True)
        run_timed(
            [sys.executable, "-m", "dots.search", *search_args(models, args, prep, trials=1)],
            env,
            prep / "dots.log",
            args.root,
        )
    if not (prep / "restart-warm.json").exists():
        print(
            "prep: one untimed restart of that trial (with vLLM: warms its compile cache for the restart directory)",
            flush=True,
        )
        run_timed(
            restart_command(prep, prep / "restart-warm.json", args.root), env, prep / "restart-warm.log", args.root
        )
    warm = json.loads((prep / "restart-warm.json").read_text())["trials"]
    print(f"prep: restart vs dots on the prep trial: {objective_check(read_trials(prep), warm)}", flush=True)
    return prep


def run_dots(
    models: Mapping[str, Path], args: argparse.Namespace, env: Mapping[str, str], prep: Path, repeat: int, position: int
) -> tuple[SideRun, Path]:
    run_dir = args.root / f"{args.engine}-r{repeat}-dots"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copy(prep / "selection.jsonl", run_dir / "selection.jsonl")
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "dots.search", *search_args(models, args, run_dir, args.trials)]
    wall, rss = run_timed(cmd, env, run_dir / "dots.log", args.root)
    if "selection: reusing" not in (run_dir / "dots.log").read_text():
        raise SystemExit(f"{run_dir}: the run did not reuse the prepared selection (settings changed?)")
    trials = read_trials(run_dir)
    if len(trials) != args.trials:
        raise SystemExit(f"{run_dir}: {len(trials)} complete trials, expected {args.trials}")
    return SideRun("dots", repeat, position, load, wall, rss, study_span(run_dir), trials), run_dir


def restart_command(run_dir: Path, out: Path, root: Path) -> list[str]:
    return [
        *module_command("benchmarks.search.restart"),
        "--restart-job",
        str(run_dir),
        "--job-out",
        str(out),
        "--root",
        str(root),
    ]


def run_restart(
    args: argparse.Namespace, env: Mapping[str, str], reference: Path, repeat: int, position: int
) -> SideRun:
    out = args.root / f"{args.engine}-r{repeat}-restart.json"
    load = os.getloadavg()[0]
    wall, rss = run_timed(restart_command(reference, out, args.root), env, out.with_suffix(".log"), args.root)
    trials = json.loads(out.read_text())["trials"]
    return SideRun("restart", repeat, position, load, wall, rss, sum(t["time"]["total"] for t in trials), trials)


def objective_check(dots_trials: list[dict], restart_trials: list[dict]) -> dict[str, Any]:
    """Restart vs dots objectives for the same trial numbers."""
    stored = {t["number"]: t for t in dots_trials}
    pairs = [(stored[r["number"]], r) for r in restart_trials]
    d_c = [abs(a["consistency"] - b["consistency"]) for a, b in pairs]
    d_p = [abs(a["perplexity"] - b["perplexity"]) for a, b in pairs]
    return {
        "trials": len(pairs),
        "max_abs_consistency": max(d_c),
        "max_abs_perplexity": max(d_p),
        "identical": sum(
            a["consistency"] == b["consistency"]
            and a["perplexity"] == b["perplexity"]
            and int(a["tokens_generated"]) == b["tokens_generated"]
            for a, b in pairs
        ),
    }
