"""Exact dominance pruning of a trial (`search.prune`): stop generating for a λ that can no
longer reach the Pareto front.

The perplexity P of the adaptation prompts is computed first (it needs no sampling), then the
Q queries are sampled in blocks of `search.batch`. After b queries with consistencies c_1..c_b,
perfect consistency on the rest bounds the trial's final consistency:

    C ≤ C_ub = (c_1 + … + c_b + (Q − b)·1) / Q        (summed in the scorer's order, so float
                                                        rounding keeps C ≤ C_ub too)

The trial stops when a complete trial q dominates (C_ub, P): q.C ≥ C_ub, q.P ≤ P, one strictly.
Then q dominates the trial at every C ≤ C_ub, so the trial can never be on the front, and a
dominated point changes neither the front (dominance is transitive) nor either pick rule,
which read only the front (dots.search.pick.pareto). A trial that could still tie a front point on
both objectives is never pruned. Fronts only improve, so the verdict holds for later trials
too, and a front read from shared storage by N workers is as good as any.

A pruned trial is told PRUNED (the front and the pick read COMPLETE trials only) with its
partial values and the bound as the user attribute PRUNED_BY; it counts toward
search.n_trials like a complete one. Samplers: TPE reads PRUNED trials without intermediate
values as bad points (its "above" set); GP and NSGA-II read complete trials only; random
reads nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["PRUNED_BY", "consistency_bound", "dominator", "is_bound_pruned"]

PRUNED_BY = "dots_pruned"  # user attribute of a trial pruned by the bound
DEFAULT_BATCH = 16  # queries per block when search.prune is on and search.batch is null


def consistency_bound(scored: Sequence[float], n_queries: int) -> float:
    """C_ub: the mean consistency if every query not yet scored were perfectly consistent (1.0),
    summed in the same order as the trial's own mean, so C ≤ C_ub holds in floating point."""
    values = list(scored) + [1.0] * (n_queries - len(scored))
    return sum(values) / len(values)


def dominates(q: tuple[float, float], p: tuple[float, float]) -> bool:
    """(consistency, perplexity) q dominates p: C ≥, PPL ≤, and one of them strictly."""
    return q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1])


def dominator(complete: Sequence[tuple[int, float, float]], bound: float, ppl: float) -> int | None:
    """The number of a complete trial (number, C, PPL) that dominates (bound, ppl), else None."""
    for number, c, p in complete:
        if dominates((c, p), (bound, ppl)):
            return number
    return None


class FrontWatch:
    """The pruning check of one study: reads its complete trials at each call (shared storage)."""

    def __init__(self, study: Any):
        self.study = study

    def __call__(self, scored: Sequence[float], n_queries: int, ppl: float) -> dict | None:
        """The PRUNED_BY record when the trial can be stopped, else None."""
        from optuna.trial import TrialState

        bound = consistency_bound(scored, n_queries)
        complete = [
            (t.number, t.values[0], t.values[1])
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        ]
        number = dominator(complete, bound, ppl)
        if number is None:
            return None
        return {
            "queries_scored": len(scored),
            "queries": n_queries,
            "consistency_partial": sum(scored) / len(scored),
            "consistency_bound": bound,
            "perplexity": ppl,
            "dominated_by": number,
        }


def attach(scorer: Any, study: Any, allowed: bool = True) -> None:
    """Give the scorer the study's front when search.prune is on (not for search.fixed points,
    whose values are the point of scoring them)."""
    if getattr(scorer, "prune", False):
        scorer.pruner = FrontWatch(study) if allowed else None


def is_bound_pruned(trial: Any) -> bool:
    return PRUNED_BY in trial.user_attrs


def count_bound_pruned(study: Any) -> int:
    """Trials pruned by the bound: scored trials that count toward search.n_trials."""
    from optuna.trial import TrialState

    return sum(is_bound_pruned(t) for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)))


def tell_scored(study: Any, trial: Any, res: Any) -> None:
    """Record a scored trial: its tokens, samples, times and per-query consistency, then COMPLETE
    with (C, PPL), or PRUNED with the PRUNED_BY record when the bound stopped it."""
    from optuna.trial import TrialState

    for name, value in (
        ("per_query_consistency", res.per_query),
        ("tokens_generated", res.tokens),
        ("samples_drawn", res.samples),
        ("majority_answers", res.answers),
        ("sampling_seed", getattr(res, "seed", None)),
        ("time", res.times),
    ):
        trial.set_user_attr(name, value)
    if res.pruned:
        trial.set_user_attr(PRUNED_BY, res.pruned)
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, [res.consistency, res.perplexity])


def outcome(res: Any) -> str:
    """A trial's result for the log: C and PPL, or where the bound pruned it."""
    if not res.pruned:
        return f"C={res.consistency:.4f} PPL={res.perplexity:.4f}"
    p = res.pruned
    return (
        f"pruned after {p['queries_scored']}/{p['queries']} queries (C ≤ {p['consistency_bound']:.4f} "
        f"at PPL={p['perplexity']:.4f} is dominated by trial {p['dominated_by']})"
    )
