"""Whole lab search: dots (one live engine, weights swapped) vs save-and-restart per trial.

    python -m benchmarks.search restart --trials 10 --repeats 5 --record

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
benchmarks/results/search.md, `--out FILE` writes every raw number as JSON.

`--trials 2 --repeats 1` is a smoke run. Any dots option goes to every dots run with
`--set key=value` (e.g. `--set engine.enforce_eager=true --set search.k=4`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks.search.restart_job import restart_job
from benchmarks.search.restart_report import record, same_lambdas, summary, table
from benchmarks.search.restart_sides import SideRun, objective_check, prepare, read_trials, run_dots, run_restart

REPO = Path(__file__).resolve().parents[2]


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
    parser.add_argument("--record", action="store_true", help="append a section to benchmarks/results/search.md")
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
