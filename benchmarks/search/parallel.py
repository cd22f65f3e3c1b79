"""Wall time of one DoTS study run by 1 worker vs 2 workers, as SLURM jobs on the lab.

Each measured run is `python -m dots.search -m hydra/launcher=slurm_local
search.workers=W 'search.worker=range(W)' search.storage=RUN/study.journal run_dir=RUN`
with the same N trials: W jobs (one array) of C CPUs each, OMP_NUM_THREADS=C. The
configurations `WxC` (default 1x2 2x1 1x1) compare one worker owning the whole 2-core
node, two workers splitting it, and one single-threaded worker (which separates the
effect of sharing the study from the effect of torch's thread count on a busy machine).
The stages that run once per run directory (task vectors, difficulty-aware selection)
are built beforehand by a prep run and copied into each run directory, so the runs
differ only in how the study is shared. Reported per run: the wall time of the whole
command (submission to last job done), the study's own span (first trial start to last
trial end, from the journal) and the median time of one trial. With `--record` the
medians over `--runs` repeats are appended to benchmarks/results/search.md.

    python -m benchmarks.search parallel --trials 12 --runs 5 --record
    python -m benchmarks.search parallel --base B --sft S --rlvr R   # a given lab trio

Needs a running cluster (scripts/slurm/start.sh).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.lab import lab_backbone
from benchmarks.harness.results import append

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Measurement:
    workers: int
    cpus: int  # per worker (= its torch threads)
    wall_s: float  # the multirun command, submission to the end of its last job
    study_s: float  # first trial start → last trial complete (journal timestamps)
    trial_s: float  # median start → complete of one trial
    trials_per_worker: list[int]


def trio(args: argparse.Namespace) -> dict[str, Path]:
    if args.base and args.sft and args.rlvr:
        return {"base": args.base.resolve(), "sft": args.sft.resolve(), "rlvr": args.rlvr.resolve()}
    from dots.lab import ensure_trio

    return ensure_trio()


def search_args(models: dict[str, Path], args: argparse.Namespace, run_dir: Path, trials: int) -> list[str]:
    """The lab backbone with its checkpoints pinned, and the search settings pinned too."""
    return [
        *lab_backbone(models, args.engine),
        f"backbone.max_tokens={args.max_tokens}",
        f"search.n_trials={trials}",
        f"search.k={args.k}",
        f"selection.n={args.selection}",
        f"pool.size={args.pool}",
        f"run_dir={run_dir}",
        f"cache_dir={args.root / 'cache'}",
    ]


def prepare(models: dict[str, Path], args: argparse.Namespace, env: dict) -> Path:
    """Task vectors and selection, once, outside the measurement (a local run, 1 trial)."""
    prep = args.root / "prep"
    if not (prep / "selection.jsonl").exists():
        print(f"prep: task vectors and selection in {prep}", flush=True)
        cmd = [
            sys.executable,
            "-m",
            "dots.search",
            *search_args(models, args, prep, trials=1),
            f"search.storage={prep / 'study.journal'}",
            "export.enabled=false",
        ]
        subprocess.run(cmd, check=True, env=env, cwd=args.root)
    return prep


def study_times(storage: Path) -> tuple[float, float, list]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    backend = JournalStorage(JournalFileBackend(str(storage)))
    (summary,) = optuna.get_all_study_summaries(backend)
    trials = optuna.load_study(study_name=summary.study_name, storage=backend).get_trials(states=(TrialState.COMPLETE,))
    span = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
    per_trial = statistics.median((t.datetime_complete - t.datetime_start).total_seconds() for t in trials)
    return span, per_trial, trials


def cancel_jobs(sweep_dir: Path) -> None:
    """scancel the jobs whose submitit folders are in this sweep dir."""
    folder = sweep_dir / ".submitit"
    ids = {p.name.split("_")[0] for p in folder.glob("*") if p.is_dir()} if folder.is_dir() else set()
    if ids:
        subprocess.run(["scancel", *sorted(ids)], capture_output=True, timeout=30)


def measure(
    models: dict[str, Path], args: argparse.Namespace, env: dict, prep: Path, workers: int, cpus: int, repeat: int
) -> Measurement:
    run_dir = args.root / f"{workers}x{cpus}-r{repeat}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copy(prep / "selection.jsonl", run_dir / "selection.jsonl")
    storage = run_dir / "study.journal"
    cmd = [
        sys.executable,
        "-m",
        "dots.search",
        "-m",
        "hydra/launcher=slurm_local",
        f"hydra.launcher.cpus_per_task={cpus}",
        f"hydra.launcher.array_parallelism={workers}",
        "hydra.launcher.setup=['export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK']",
        f"hydra.sweep.dir={run_dir / 'multirun'}",
        *search_args(models, args, run_dir, args.trials),
        f"search.workers={workers}",
        f"search.worker=range({workers})",
        f"search.storage={storage}",
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=args.root, capture_output=True, text=True)
    except BaseException:  # interrupted: its jobs would go on writing into run_dir
        cancel_jobs(run_dir / "multirun")
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{workers}x{cpus} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    span, per_trial, trials = study_times(storage)
    if len(trials) != args.trials:
        raise SystemExit(f"{workers}x{cpus} run has {len(trials)} complete trials, expected {args.trials}")
    logs = sorted((run_dir / "multirun" / ".submitit").glob("*/*_0_log.out"))
    per_worker = [sum(line.startswith("trial ") for line in p.read_text().splitlines()) for p in logs]
    return Measurement(workers, cpus, wall, span, per_trial, per_worker)


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3, help="repeats of each worker count (medians reported)")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["1x2", "2x1", "1x1"],
        help="WxC: W workers with C CPUs (and torch threads) each",
    )
    parser.add_argument("--engine", default="hf")
    parser.add_argument("--k", type=int, default=4, help="samples per query and trial")
    parser.add_argument("--selection", type=int, default=16, help="adaptation queries")
    parser.add_argument("--pool", type=int, default=64, help="unlabeled queries the selection draws from")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-parallel-bench"))
    parser.add_argument("--base", type=Path)
    parser.add_argument("--sft", type=Path)
    parser.add_argument("--rlvr", type=Path)
    parser.add_argument("--record", action="store_true", help="append the medians to benchmarks/results/search.md")
    parser.add_argument("--machine", default="2 CPU cores, 24 GiB RAM, shared with other engineers' jobs")
    parser.add_argument("--date", default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `kill` cancels the jobs of the current run
    args.root = args.root.resolve()
    args.root.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's dots
    env = {**os.environ, "PYTHONPATH": path, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(args.root / "outputs")}
    models = trio(args)
    prep = prepare(models, args, env)
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs]
    results: dict[tuple[int, int], list[Measurement]] = {c: [] for c in configs}
    loads = []
    for repeat in range(args.runs):
        for workers, cpus in configs if repeat % 2 == 0 else configs[::-1]:  # alternate: load drift hits all
            loads.append(os.getloadavg()[0])
            m = measure(models, args, env, prep, workers, cpus, repeat)
            results[(workers, cpus)].append(m)
            print(
                f"run {repeat + 1}, {workers}x{cpus}: wall {m.wall_s:.1f} s, study {m.study_s:.1f} s, "
                f"trial {m.trial_s:.2f} s, trials per worker {m.trials_per_worker}, load {load_average()}",
                flush=True,
            )
    med = {
        c: {key: statistics.median(getattr(m, key) for m in ms) for key in ("wall_s", "study_s", "trial_s")}
        for c, ms in results.items()
    }
    lines = [
        "| workers × CPUs (threads) each | median wall (s) | median study span (s) | median trial (s) | "
        "trials per worker (each run) |",
        "|---|---|---|---|---|",
    ]
    for (w, c), ms in results.items():
        split = "; ".join("+".join(map(str, m.trials_per_worker)) for m in ms)
        lines.append(
            f"| {w} × {c} | {med[(w, c)]['wall_s']:.1f} | {med[(w, c)]['study_s']:.1f} | "
            f"{med[(w, c)]['trial_s']:.2f} | {split} |"
        )
    ratios = []
    for one in (c for c in configs if c[0] == 1):
        for two in (c for c in configs if c[0] == 2):
            paired = {
                key: sorted(b.__dict__[key] / a.__dict__[key] for a, b in zip(results[one], results[two]))
                for key in ("wall_s", "study_s")
            }  # same repeat, adjacent in time: similar load
            ratios.append(
                f"{two[0]}×{two[1]} / {one[0]}×{one[1]}: wall {med[two]['wall_s'] / med[one]['wall_s']:.2f} "
                f"(paired {statistics.median(paired['wall_s']):.2f}, "
                f"{paired['wall_s'][0]:.2f}–{paired['wall_s'][-1]:.2f}), "
                f"study span {med[two]['study_s'] / med[one]['study_s']:.2f} "
                f"(paired {statistics.median(paired['study_s']):.2f}, "
                f"{paired['study_s'][0]:.2f}–{paired['study_s'][-1]:.2f})"
            )
    summary = (
        f"Ratios of medians (and median, range of the per-repeat ratios) — {'; '.join(ratios)} "
        f"(1-min load average at the start of each run: "
        f"{min(loads):.1f}–{max(loads):.1f})"
    )
    print("\n".join(lines))
    print(summary)
    if args.record:
        date = args.date or datetime.date.today().isoformat()
        text = [
            "",
            f"## Parallel search: 2 workers vs 1 on the local SLURM cluster — {date}",
            "",
            f"Command: `python -m benchmarks.search parallel {' '.join(shlex.quote(a) for a in sys.argv[1:])}` "
            "(each run: `python -m dots.search -m hydra/launcher=slurm_local hydra.launcher.cpus_per_task=C "
            "\"hydra.launcher.setup=['export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK']\" "
            "search.workers=W 'search.worker=range(W)' search.storage=RUN/study.journal run_dir=RUN ...`, "
            f"lab backbone, engine={args.engine}, k={args.k}, {args.selection} selected queries of {args.pool}, "
            f"max_tokens={args.max_tokens}, N={args.trials} trials; task vectors and selection prepared "
            "once outside the timing).",
            f"Machine: {args.machine}; the one-node cluster of scripts/slurm/start.sh ({os.cpu_count()} CPUs). "
            f"Medians of {args.runs} runs per configuration, in alternating order. Wall: the whole command "
            "(submission, job start, imports, engine start, study, pick, export, submitit polling); study "
            "span: first trial start to last trial end; trial: start to end of one trial.",
            "",
            *lines,
            "",
            summary + ".",
            "",
        ]
        append("\n".join(text), "search")


if __name__ == "__main__":
    main()
