"""What pruning (search.prune) and stopping (search.stop) save on finished searches (#30).

    python -m benchmarks.search prune-stop lab [--samplers tpe random] [--seeds 0 1 2] [--trials 25] [--batch 16]
    python -m benchmarks.search prune-stop simulate [--samplers tpe random] [--seeds 20] [--trials 30] [--aligned]
        [--batch 16]
    python -m benchmarks.search prune-stop compare OFF_RUN_DIR ON_RUN_DIR [--pick max_consistency]
    python -m benchmarks.search prune-stop stop RUN_DIR... [--windows 5 10] [--thresholds 0.001 0.01]

`simulate` runs dots' study, Scorer (blocks, pruning) and pick against a synthetic engine (no
model: each query's answer is right with a probability that falls with the distance of λ from an
optimum; PPL is a quadratic in λ with its own optimum, or near the consistency's with --aligned,
which makes fronts of 1–3 points) to ask, over many seeds in seconds, whether pruning changes the
points TPE visits, the front or the pick.

`lab` runs dots' own study (`open_study`/`run_study`, the sampler registry, the `Scorer` with
search.batch blocks and pruning, the pick) on the shipped lab (seed 0) with prune off and on,
generating with the lab's fast KV-cached sampler as benchmarks/pick/samplers.py does (its `Lab`
and `LabEngine`: ~15× faster than transformers' generate on the lab); one run directory per
(sampler, seed, prune) under $DOTS_OUTPUTS/bench/prune_stop/ (study.db), then compares them.

`compare` reads two run directories of the same search, one with search.prune=false and one
with search.prune=true (same search.batch): are the proposed points, the Pareto fronts and the
picks identical, and how many trials and generated tokens did pruning save. `stop` replays the
stop rule (dots.search.study.stopping, a pure function of the finished trials in order) on a
finished study: where it would have fired, the tokens spent until then, and whether the pick
of the trials up to that point is the study's final pick. Tokens are the trials' recorded
`tokens_generated`. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from benchmarks.search.prune_engine import SynthEngine
from dots.search.pick.pareto import Point, pareto_front, pick
from dots.search.study.pruning import is_bound_pruned
from dots.search.study.stopping import relative_gain

ROOT = Path(__file__).resolve().parents[2]


def load_trials(run_dir: Path) -> list[Any]:
    """The scored trials (complete, or pruned by the bound) of the run's study, in finishing order."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{run_dir / 'study.db'}"
    (summary,) = [s for s in optuna.get_all_study_summaries(storage) if not s.study_name.endswith("-fixed")]
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    trials = [t for t in study.get_trials() if t.state == TrialState.COMPLETE or is_bound_pruned(t)]
    return sorted(trials, key=lambda t: (t.datetime_complete, t.number))


def point(t: Any) -> Point:
    return Point(t.number, t.values[0], t.values[1], dict(t.params))


def pick_of(trials: list[Any], rule: str) -> Point:
    return pick(pareto_front([point(t) for t in trials if t.values is not None]), rule)


def tokens(trials: list[Any]) -> int:
    return sum(int(t.user_attrs.get("tokens_generated", 0)) for t in trials)


def until_pick(trials: list[Any], rule: str) -> tuple[int, int]:
    """(trials, tokens) until the final pick was first the pick and stayed it."""
    final = pick_of(trials, rule).number
    n = len(trials)
    while n > 1 and pick_of(trials[: n - 1], rule).number == final:
        n -= 1
    return n, tokens(trials[:n])


def compare(off_dir: Path, on_dir: Path, rule: str) -> None:
    off, on = load_trials(off_dir), load_trials(on_dir)
    same_points = [t.params for t in sorted(off, key=lambda t: t.number)] == [
        t.params for t in sorted(on, key=lambda t: t.number)
    ]
    front_off = pareto_front([point(t) for t in off])
    front_on = pareto_front([point(t) for t in on if t.values is not None])
    pruned = [t for t in on if t.values is None]
    saved = 1 - tokens(on) / tokens(off)
    print("| run | scored trials | pruned | tokens | trials / tokens until the pick is fixed | pick (trial: C, PPL) |")
    print("|---|---|---|---|---|---|")
    for name, trials in (("prune off", off), ("prune on", on)):
        p = pick_of(trials, rule)
        n, tok = until_pick(trials, rule)
        n_pruned = sum(t.values is None for t in trials)
        print(
            f"| {name} | {len(trials)} | {n_pruned} | {tokens(trials):,} | {n} / {tok:,} | "
            f"#{p.number}: {p.consistency:.4f}, {p.perplexity:.4f} |"
        )
    queries = [t.user_attrs["dots_pruned"]["queries_scored"] for t in pruned]
    print(
        f"\nsame points proposed: {same_points}; fronts identical: {front_off == front_on}; "
        f"picks identical: {pick_of(off, rule) == pick_of(on, rule)}; tokens saved: {100 * saved:.1f}%; "
        f"pruned trials stopped after {sorted(queries)} queries"
    )


def fires(trials: list[Any], window: int, threshold: float) -> int | None:
    """The number of scored trials after which the stop rule fires on these trials, or None."""
    history = [(t.values[0], t.values[1]) if t.values is not None else None for t in trials]
    return next(
        (n for n in range(2 * window, len(trials) + 1) if relative_gain(history[:n], window) <= threshold),
        None,
    )


def stop(run_dirs: list[Path], windows: list[int], thresholds: list[float], rule: str) -> None:
    print("| run | window | threshold | fires after (scored trials) | tokens until then | of all | pick kept |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in run_dirs:
        trials = load_trials(run_dir)
        final = pick_of(trials, rule).number
        for window in windows:
            for threshold in thresholds:
                at = fires(trials, window, threshold)
                if at is None:
                    print(f"| {run_dir.name} | {window} | {threshold} | never ({len(trials)}) | — | — | — |")
                    continue
                kept = pick_of(trials[:at], rule).number == final
                print(
                    f"| {run_dir.name} | {window} | {threshold} | {at} | {tokens(trials[:at]):,} | "
                    f"{100 * tokens(trials[:at]) / tokens(trials):.0f}% | {kept} |"
                )


def lab_runs(samplers: list[str], seeds: list[int], trials: int, batch: int) -> None:
    """Prune off and on for each sampler and seed on the shipped lab; then `compare` and `stop`."""
    import os

    import optuna

    from benchmarks.harness.lab import Lab, search_cfg
    from dots.options.search import search_options
    from dots.options.study import study_options
    from dots.search.study.scorer import Scorer
    from dots.search.study.storage import open_storage, open_study
    from dots.search.study.trials import run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    lab = Lab(0)
    root = Path(os.environ.get("DOTS_OUTPUTS") or ROOT / "outputs") / "bench" / "prune_stop"
    for seed in seeds:
        for sampler in samplers:
            dirs = []
            for prune in ("false", "true"):
                out = root / f"{sampler}-seed{seed}-prune-{prune}"
                out.mkdir(parents=True, exist_ok=True)
                extra = [f"sampler={sampler}", f"seed={seed}", f"search.batch={batch}", f"search.prune={prune}"]
                cfg = search_cfg(0, lab.paths, [*extra, f"search.n_trials={trials}", f"run_dir={out}"])
                study = open_study(search_options(cfg), open_storage(None, out), "prune-stop")
                began = time.perf_counter()
                scorer = Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer)
                run_study(study, scorer, list(lab.tv.sources), tuple(cfg.search.range), trials, seed)
                print(f"{out.name}: {time.perf_counter() - began:.0f} s", flush=True)
                dirs.append(out)
            print(f"\n### {sampler}, seed {seed}\n")
            compare(dirs[0], dirs[1], "max_consistency")
            print()
            stop([dirs[0]], [5, 10], [0.001, 0.01], "max_consistency")


def simulate(samplers: list[str], seeds: int, trials: int, aligned: bool, batch: int = 16) -> None:
    """Prune off and on against SynthEngine; one row per (sampler, seed), then the totals."""
    import statistics

    import optuna

    from dots.options.compose import compose
    from dots.options.study import study_options
    from dots.search.study.samplers import build_sampler
    from dots.search.study.scorer import Scorer
    from dots.search.study.trials import run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    center = (1.1, 0.9) if aligned else (0.3, 0.4)

    def one(sampler: str, seed: int, prune: bool) -> Any:
        search = {"k": 8, "temperature": 0.6, "top_p": 1.0, "max_tokens": 32, "answer_mode": "math"}
        options = study_options({**search, "batch": batch, "prune": prune, "adaptive": {"enabled": False}})
        chosen = compose("search", [f"sampler={sampler}", "search.n_startup_trials=10"]).sampler
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=build_sampler(chosen, seed))
        scorer = Scorer(SynthEngine(center), [f"q {i}" for i in range(64)], options)
        run_study(study, scorer, ["a", "b"], (0.0, 2.0), trials, seed)
        return study

    print(
        "| sampler | seed | same points | same front | same picks (both rules) | pruned | tokens saved | front size |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows: list[tuple] = []
    stops: list[tuple] = []
    for sampler in samplers:
        for seed in range(seeds):
            off, on = one(sampler, seed, False), one(sampler, seed, True)
            f_off = pareto_front([point(t) for t in off.get_trials() if t.state.name == "COMPLETE"])
            f_on = pareto_front([point(t) for t in on.get_trials() if t.state.name == "COMPLETE"])
            row = (
                [t.params for t in off.get_trials()] == [t.params for t in on.get_trials()],
                f_off == f_on,
                all(pick(f_off, r) == pick(f_on, r) for r in ("max_consistency", "knee")),
                sum(is_bound_pruned(t) for t in on.get_trials()),
                1 - tokens(on.get_trials()) / tokens(off.get_trials()),
            )
            done = sorted(off.get_trials(), key=lambda t: (t.datetime_complete, t.number))
            for window, threshold in ((5, 0.01), (10, 0.01)):
                at = fires(done, window, threshold)
                kept = at is not None and pick_of(done[:at], "max_consistency") == pick_of(done, "max_consistency")
                stops.append((window, at, kept))
            rows.append(row)
            cells = [sampler, seed, *row[:4], f"{100 * row[4]:.1f}%", len(f_off)]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    print(
        f"\nsame points {sum(r[0] for r in rows)}/{len(rows)}, same front {sum(r[1] for r in rows)}/{len(rows)}, "
        f"same picks {sum(r[2] for r in rows)}/{len(rows)}; "
        f"pruned trials median {statistics.median(r[3] for r in rows)}, "
        f"tokens saved median {100 * statistics.median(r[4] for r in rows):.1f}% "
        f"[{100 * min(r[4] for r in rows):.1f}–{100 * max(r[4] for r in rows):.1f}%]"
    )
    for window in (5, 10):
        at = [(n, kept) for w, n, kept in stops if w == window]
        fired = [n for n, _ in at if n is not None]
        median = statistics.median(fired) if fired else "—"
        print(
            f"stop rule W={window}, threshold 1% (prune off studies of {trials} trials): "
            f"fired in {len(fired)}/{len(at)}, median after {median} trials, "
            f"pick kept {sum(k for _, k in at)}/{len(fired)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pick", default="max_consistency")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sim = sub.add_parser("simulate")
    sim.add_argument("--samplers", nargs="+", default=["tpe", "random"])
    sim.add_argument("--seeds", type=int, default=20)
    sim.add_argument("--trials", type=int, default=30)
    sim.add_argument("--aligned", action="store_true")
    sim.add_argument("--batch", type=int, default=16)
    lab = sub.add_parser("lab")
    lab.add_argument("--samplers", nargs="+", default=["tpe", "random"])
    lab.add_argument("--seeds", type=int, nargs="+", default=[0])
    lab.add_argument("--trials", type=int, default=25)
    lab.add_argument("--batch", type=int, default=16)
    c = sub.add_parser("compare")
    c.add_argument("off", type=Path)
    c.add_argument("on", type=Path)
    s = sub.add_parser("stop")
    s.add_argument("runs", type=Path, nargs="+")
    s.add_argument("--windows", type=int, nargs="+", default=[5, 10])
    s.add_argument("--thresholds", type=float, nargs="+", default=[0.001, 0.01])
    args = parser.parse_args()
    if args.cmd == "simulate":
        simulate(args.samplers, args.seeds, args.trials, args.aligned, args.batch)
    elif args.cmd == "lab":
        lab_runs(args.samplers, args.seeds, args.trials, args.batch)
    elif args.cmd == "compare":
        compare(args.off, args.on, args.pick)
    else:
        stop(args.runs, args.windows, args.thresholds, args.pick)


if __name__ == "__main__":
    main()
