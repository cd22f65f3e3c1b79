"""Wall time of one DoTS study run by 1 worker vs 2 workers, as SLURM jobs on the lab.

Each measured run is `python -m dots.search -m hydra/launcher=slurm_local
search.workers=W 'search.worker=range(W)' search.storage=RUN/study.journal run_dir=RUN`
with the same N trials: one job array of W tasks sharing the node's CPUs (W=1: one job
with every CPU; W=2: each job half of them), OMP_NUM_THREADS set to the job's CPUs.
The stages that run once per run directory (task vectors, difficulty-aware selection)
are built beforehand by a prep run and copied into each run directory, so the runs
differ only in how the study is shared. Reported per run: the wall time of the whole
command (submission to last job done), the study's own span (first trial start to last
trial end, from the journal) and the median time of one trial. With `--record` the
medians over `--runs` repeats are appended to benchmarks/RESULTS.md.

    python benchmarks/parallel_search.py --trials 12 --runs 3 --record
    python benchmarks/parallel_search.py --base B --sft S --rlvr R   # a given lab trio

Needs a running cluster (scripts/slurm/start.sh).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Measurement:
    workers: int
    wall_s: float          # the multirun command, submission to the end of its last job
    study_s: float         # first trial start → last trial complete (journal timestamps)
    trial_s: float         # median start → complete of one trial
    trials_per_worker: list[int]


def trio(args: argparse.Namespace) -> dict[str, Path]:
    if args.base and args.sft and args.rlvr:
        return {"base": args.base.resolve(), "sft": args.sft.resolve(), "rlvr": args.rlvr.resolve()}
    from dots.lab import ensure_trio

    return ensure_trio()


def search_args(models: dict[str, Path], args: argparse.Namespace, run_dir: Path, trials: int) -> list[str]:
    """The lab backbone with its checkpoints pinned, and the search settings pinned too."""
    return [
        "backbone=lab", f"engine={args.engine}", f"backbone.base={models['base']}",
        f"backbone.sources.sft={models['sft']}", f"backbone.sources.rlvr={models['rlvr']}",
        f"backbone.max_tokens={args.max_tokens}", f"search.n_trials={trials}", f"search.k={args.k}",
        f"selection.n={args.selection}", f"pool.size={args.pool}", f"run_dir={run_dir}", f"cache_dir={args.root / 'cache'}",
    ]


def prepare(models: dict[str, Path], args: argparse.Namespace, env: dict) -> Path:
    """Task vectors and selection, once, outside the measurement (a local run, 1 trial)."""
    prep = args.root / "prep"
    if not (prep / "selection.jsonl").exists():
        print(f"prep: task vectors and selection in {prep}", flush=True)
        cmd = [sys.executable, "-m", "dots.search", *search_args(models, args, prep, trials=1),
               f"search.storage={prep / 'study.journal'}", "export.enabled=false"]
        subprocess.run(cmd, check=True, env=env, cwd=args.root)
    return prep


def study_times(storage: Path) -> tuple[float, float, list]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    backend = JournalStorage(JournalFileBackend(str(storage)))
    (summary,) = optuna.get_all_study_summaries(backend)
    trials = optuna.load_study(study_name=summary.study_name, storage=backend).get_trials(
        states=(TrialState.COMPLETE,))
    span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
    per_trial = statistics.median((t.datetime_complete - t.datetime_start).total_seconds() for t in trials)
    return span, per_trial, trials


def measure(models: dict[str, Path], args: argparse.Namespace, env: dict, prep: Path, workers: int,
            repeat: int) -> Measurement:
    run_dir = args.root / f"w{workers}-r{repeat}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copy(prep / "selection.jsonl", run_dir / "selection.jsonl")
    storage = run_dir / "study.journal"
    cpus = max(args.cpus // workers, 1)
    cmd = [sys.executable, "-m", "dots.search", "-m", "hydra/launcher=slurm_local",
           f"hydra.launcher.cpus_per_task={cpus}", f"hydra.launcher.array_parallelism={workers}",
           "hydra.launcher.setup=['export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK']",
           f"hydra.sweep.dir={run_dir / 'multirun'}", *search_args(models, args, run_dir, args.trials),
           f"search.workers={workers}", f"search.worker=range({workers})", f"search.storage={storage}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=args.root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{workers}-worker run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    span, per_trial, trials = study_times(storage)
    if len(trials) != args.trials:
        raise SystemExit(f"{workers}-worker run has {len(trials)} complete trials, expected {args.trials}")
    logs = sorted((run_dir / "multirun" / ".submitit").glob("*/*_0_log.out"))
    per_worker = [sum(line.startswith("trial ") for line in p.read_text().splitlines()) for p in logs]
    return Measurement(workers, wall, span, per_trial, per_worker)


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3, help="repeats of each worker count (medians reported)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the node, split among workers")
    parser.add_argument("--engine", default="hf")
    parser.add_argument("--k", type=int, default=4, help="samples per query and trial")
    parser.add_argument("--selection", type=int, default=16, help="adaptation queries")
    parser.add_argument("--pool", type=int, default=64, help="unlabeled queries the selection draws from")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-parallel-bench"))
    parser.add_argument("--base", type=Path)
    parser.add_argument("--sft", type=Path)
    parser.add_argument("--rlvr", type=Path)
    parser.add_argument("--record", action="store_true", help="append the medians to benchmarks/RESULTS.md")
    parser.add_argument("--machine", default="2 CPU cores, 24 GiB RAM, shared with other engineers' jobs")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    args.root = args.root.resolve()
    args.root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(args.root / "outputs")}
    models = trio(args)
    prep = prepare(models, args, env)
    results: dict[int, list[Measurement]] = {1: [], 2: []}
    loads = []
    for repeat in range(args.runs):
        for workers in ((1, 2) if repeat % 2 == 0 else (2, 1)):  # alternate, so load drift hits both
            loads.append(os.getloadavg()[0])
            m = measure(models, args, env, prep, workers, repeat)
            results[workers].append(m)
            print(f"run {repeat + 1}, {workers} worker(s): wall {m.wall_s:.1f} s, study {m.study_s:.1f} s, "
                  f"trial {m.trial_s:.2f} s, trials per worker {m.trials_per_worker}, load {load_average()}",
                  flush=True)
    med = {w: {key: statistics.median(getattr(m, key) for m in ms) for key in ("wall_s", "study_s", "trial_s")}
           for w, ms in results.items()}
    lines = ["| workers | CPUs per worker | median wall (s) | median study span (s) | median trial (s) | "
             "trials per worker (each run) |", "|---|---|---|---|---|---|"]
    for w in (1, 2):
        split = "; ".join("+".join(map(str, m.trials_per_worker)) for m in results[w])
        lines.append(f"| {w} | {max(args.cpus // w, 1)} | {med[w]['wall_s']:.1f} | {med[w]['study_s']:.1f} | "
                     f"{med[w]['trial_s']:.2f} | {split} |")
    ratio_wall = med[2]["wall_s"] / med[1]["wall_s"]
    ratio_study = med[2]["study_s"] / med[1]["study_s"]
    summary = (f"2 workers / 1 worker: wall {ratio_wall:.2f}×, study span {ratio_study:.2f}× "
               f"(1-min load average at the start of each run: {min(loads):.1f}–{max(loads):.1f})")
    print("\n".join(lines))
    print(summary)
    if args.record:
        date = args.date or datetime.date.today().isoformat()
        text = [
            "", f"## Parallel search: 2 workers vs 1 on the local SLURM cluster — {date}", "",
            f"Command: `python benchmarks/parallel_search.py --trials {args.trials} --runs {args.runs} --record` "
            "(each run: `python -m dots.search -m hydra/launcher=slurm_local hydra.launcher.cpus_per_task=C "
            "search.workers=W 'search.worker=range(W)' search.storage=RUN/study.journal run_dir=RUN ...`, "
            f"lab backbone, engine={args.engine}, k={args.k}, {args.selection} selected queries of {args.pool}, "
            f"max_tokens={args.max_tokens}, N={args.trials} trials; task vectors and selection prepared "
            "once outside the timing).",
            f"Machine: {args.machine}; the one-node cluster of scripts/slurm/start.sh ({args.cpus} CPUs). "
            f"Medians of {args.runs} runs per worker count; runs alternate between 1 and 2 workers.", "",
            *lines, "", summary + ".", "",
        ]
        with open(REPO / "benchmarks" / "RESULTS.md", "a") as fh:
            fh.write("\n".join(text))


if __name__ == "__main__":
    main()
