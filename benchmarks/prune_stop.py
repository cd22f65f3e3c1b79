"""What pruning (search.prune) and stopping (search.stop) save on finished searches (#30).

    python benchmarks/prune_stop.py compare OFF_RUN_DIR ON_RUN_DIR [--pick max_consistency]
    python benchmarks/prune_stop.py stop RUN_DIR... [--windows 5 10] [--thresholds 0.001 0.01]

`compare` reads two run directories of the same search, one with search.prune=false and one
with search.prune=true (same search.batch): are the proposed points, the Pareto fronts and the
picks identical, and how many trials and generated tokens did pruning save. `stop` replays the
stop rule (dots.search.stopping, a pure function of the finished trials in order) on a
finished study: where it would have fired, the tokens spent until then, and whether the pick
of the trials up to that point is the study's final pick. Tokens are the trials' recorded
`tokens_generated`. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dots.search.pareto import Point, pareto_front, pick  # noqa: E402
from dots.search.pruning import is_bound_pruned  # noqa: E402
from dots.search.stopping import relative_gain  # noqa: E402


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


def stop(run_dirs: list[Path], windows: list[int], thresholds: list[float], rule: str) -> None:
    print("| run | window | threshold | fires after (scored trials) | tokens until then | of all | pick kept |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in run_dirs:
        trials = load_trials(run_dir)
        history = [(t.values[0], t.values[1]) if t.values is not None else None for t in trials]
        final = pick_of(trials, rule).number
        for window in windows:
            for threshold in thresholds:
                at = next(
                    (n for n in range(2 * window, len(trials) + 1) if relative_gain(history[:n], window) <= threshold),
                    None,
                )
                if at is None:
                    print(f"| {run_dir.name} | {window} | {threshold} | never ({len(trials)}) | — | — | — |")
                    continue
                kept = pick_of(trials[:at], rule).number == final
                print(
                    f"| {run_dir.name} | {window} | {threshold} | {at} | {tokens(trials[:at]):,} | "
                    f"{100 * tokens(trials[:at]) / tokens(trials):.0f}% | {kept} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pick", default="max_consistency")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("off", type=Path)
    c.add_argument("on", type=Path)
    s = sub.add_parser("stop")
    s.add_argument("runs", type=Path, nargs="+")
    s.add_argument("--windows", type=int, nargs="+", default=[5, 10])
    s.add_argument("--thresholds", type=float, nargs="+", default=[0.001, 0.01])
    args = parser.parse_args()
    if args.cmd == "compare":
        compare(args.off, args.on, args.pick)
    else:
        stop(args.runs, args.windows, args.thresholds, args.pick)


if __name__ == "__main__":
    main()
