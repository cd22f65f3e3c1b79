"""The search's report: every trial (trials.csv), the Pareto front and its pick
(result.yaml, pareto.png; DoTS App. A.2).

trials.csv has one column per Optuna parameter (`lambda_<source>`, or
`lambda_<source>_<group>` with search.granularity=module); result.yaml's `coefficients` (λ*)
and the front's are the synthesis coefficients: a float per source, or a {group: λ} per
source (dots.search.study.granularity)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import yaml

from dots.engines.canary import read_canary, summary
from dots.io.commit import write_atomic
from dots.search.pick.confirm import confirmed_choice
from dots.search.pick.landscape import plot_landscape
from dots.search.pick.pareto import Point, pareto_front, plot_front, write_trials_csv
from dots.search.pick.rules import PickContext, rank, uncertainty
from dots.search.study.dashboard import attach_artifacts
from dots.search.study.granularity import DEFAULT_GRANULARITY, coefficients_from_params, param_names
from dots.search.study.pruning import PRUNED_BY, count_bound_pruned
from dots.search.study.stopping import STOPPED
from dots.vectors.coefficients import format_coefficients

__all__ = ["complete_points", "pick_and_report", "pick_line", "standing_pick", "trial_rows"]


def trial_rows(study: Any, sources: list[str], granularity: str = DEFAULT_GRANULARITY) -> list[dict]:
    """One row per trial (`trial_row`), in trial order: trials.csv."""
    names = param_names(sources, granularity)
    return [trial_row(t, names) for t in study.get_trials(deepcopy=False)]


def trial_row(t: Any, names: list[str]) -> dict:
    """A trial's row of trials.csv (a `FrozenTrial`; `names` its λ parameters): number, state, λ,
    objectives, tokens, samples, the sampling seed, where the bound pruned it, phase times."""
    from optuna.trial import TrialState

    times = t.user_attrs.get("time", {})
    row = {"number": t.number, "state": t.state.name}
    row.update({n: t.params.get(n) for n in names})
    ok = t.state == TrialState.COMPLETE
    row.update(
        {
            "consistency": t.values[0] if ok else None,
            "perplexity": t.values[1] if ok else None,
            "tokens_generated": t.user_attrs.get("tokens_generated"),
            "samples_drawn": t.user_attrs.get("samples_drawn"),
            "sampling_seed": t.user_attrs.get("sampling_seed"),
            "pruned_after_queries": t.user_attrs.get(PRUNED_BY, {}).get("queries_scored"),
        }
    )
    row.update({f"time_{k}": round(v, 4) for k, v in times.items()})
    return row


def complete_points(study: Any, sources: list[str], granularity: str = DEFAULT_GRANULARITY) -> list[Point]:
    """The study's complete trials as Points (λ, C, PPL, majority answers, per-query C)."""
    from optuna.trial import TrialState

    def attr(t: Any, name: str) -> tuple | None:
        value = t.user_attrs.get(name)
        return tuple(value) if value else None

    return [
        Point(
            t.number,
            t.values[0],
            t.values[1],
            coefficients_from_params(t.params, sources, granularity),
            attr(t, "majority_answers"),
            attr(t, "per_query_consistency"),
        )  # fmt: skip
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    ]


def pick_and_report(
    study: Any,
    sources: list[str],
    rule: str,
    run_dir: Path,
    title: str,
    granularity: str = DEFAULT_GRANULARITY,
    warnings: Callable[[Any, dict], list[str]] | None = None,
    context: PickContext | None = None,
    confirmation: dict | None = None,
) -> dict:
    """The front of the complete trials and its pick by `rule` (or by the `confirmation` stage's
    estimates, when it ran), written as result.yaml, trials.csv, pareto.png and landscape.png (also
    attached to the study for optuna-dashboard); result.yaml's content."""
    context = context or PickContext()
    points = complete_points(study, sources, granularity)
    front = pareto_front(points)
    confirmation = confirmation if confirmation and confirmation.get("points") else {}
    confirmed = confirmed_choice(confirmation["points"]) if confirmation else None
    chosen = next(p for p in points if p.number == confirmed["trial"]) if confirmed else rank(rule, points, context)[0]
    sure = uncertainty(chosen, rule, points, context)
    if confirmed:  # the fresh estimate, the search's own beside it
        sure = {
            "consistency": confirmed["consistency"], "interval": list(confirmed["interval"]), "from": "confirmation",
            "queries": confirmation["n_queries"], "search": sure,
        }  # fmt: skip
    write_trials_csv(trial_rows(study, sources, granularity), run_dir / "trials.csv")
    plot_front(points, front, chosen, run_dir / "pareto.png", title)
    result = {
        "trial": chosen.number,
        "pick": rule,
        "coefficients": copy.deepcopy(dict(chosen.params)),  # (no YAML aliases between per-group dicts)
        "objectives": {"consistency": chosen.consistency, "perplexity": chosen.perplexity},
        "uncertainty": sure,
        "front": [
            {
                "trial": p.number,
                "consistency": p.consistency,
                "perplexity": p.perplexity,
                "coefficients": copy.deepcopy(dict(p.params)),
            }
            for p in front
        ],
        "range": list(context.bounds),
        "complete_trials": len(points),
        "pruned_trials": count_bound_pruned(study),
    }
    if confirmation:
        result["confirmation"] = {k: v for k, v in confirmation.items() if k != "key"}
    plot_landscape(points, front, chosen, run_dir / "landscape.png", context.bounds, confirmation, title, sure)
    canary = summary(read_canary(run_dir))  # the engine's last swap canary (dots.engines.canary)
    if canary is not None:
        result["swap_canary"] = canary
    if study.user_attrs.get(STOPPED):  # search.stop ended the study early: why, and when
        result["stopped"] = study.user_attrs[STOPPED]
    if warnings is not None:  # what the pick looks like without labels (dots.search.pick.diagnosis)
        result["warnings"] = warnings(study, result)
    write_atomic(run_dir / "result.yaml", yaml.safe_dump(result, sort_keys=False))
    study.set_user_attr("pick", {k: result[k] for k in ("trial", "pick", "coefficients", "objectives")})
    figures = [run_dir / "pareto.png", run_dir / "landscape.png"]
    attach_artifacts(study, run_dir, [*figures, run_dir / "result.yaml", run_dir / "trials.csv"])
    return result


def pick_line(result: dict, rule: str) -> str:
    """The search's last word on its pick (result.yaml's content), λ at 2 decimals as the README
    states it: trial, λ, C and PPL, and the confirmed C with its 95% interval when confirmed."""
    sure = result.get("uncertainty") or {}
    confirmed = sure.get("from") == "confirmation"
    objectives = result["objectives"]
    line = (
        f"pick ({rule}{', confirmed' if confirmed else ''}): trial {result['trial']}, "
        f"λ {format_coefficients(result['coefficients'], digits=2)}; "
        f"C {objectives['consistency']:.3f}, PPL {objectives['perplexity']:.2f}"
    )
    if confirmed:
        line += f"; confirmed C {sure['consistency']:.3f}"
    if "interval" in sure:
        low, high = sure["interval"]
        line += f", 95% interval {low:.3f}–{high:.3f}" + (
            f" over {sure['queries']} queries" if "queries" in sure else ""
        )
    return line


def standing_pick(
    sources: list[str], rule: str, context: PickContext, granularity: str = DEFAULT_GRANULARITY
) -> Callable[[Any], str]:
    """The progress bar's text after a trial: the trial the pick `rule` would take now (before any
    confirmation) and the size of the front it stands on."""

    def text(study: Any) -> str:
        points = complete_points(study, sources, granularity)
        if not points:
            return ""
        chosen = rank(rule, points, context)[0]
        return f"pick now #{chosen.number} (C {chosen.consistency:.3f}; front of {len(pareto_front(points))})"

    return text
