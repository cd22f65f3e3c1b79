"""The pick rules (docs/method.md §5): each ranks the candidates best first; the pick is the first,
and the confirmation stage (dots.search.pick.confirm) re-scores the first few.

- max_consistency (DoTS App. A.2): the highest C, ties → lower PPL, then the earlier trial (that
  point is on the front); the rest of the complete trials follow in the same order, so the
  confirmation also re-scores trials whose C was within noise of it but whose PPL kept them off
  the front.
- knee: the front by distance to the ideal (max C, min PPL) after min-max scaling.
- agreement: the front by a(t) = mean_i a(t, source_i) ↓ — the share of selected queries where the
  trial's majority answer is a source's (dots.search.pick.diagnosis.agreement) — then C ↓.
- smoothed: every complete trial by the smoothed Ĉ ↓ (dots.search.pick.smoothing), then PPL ↑.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from dots.errors import DotsError
from dots.registry import Registry
from dots.search.pick.confirm import interval_of
from dots.search.pick.diagnosis import agreement, flat_coefficients, same_answer
from dots.search.pick.pareto import Point, by_knee, pareto_front
from dots.search.pick.smoothing import Smoothed, fit_smoother

__all__ = ["PICK_RULES", "PickContext", "rank", "smoother_of", "uncertainty", "agreement_of"]


@dataclass(frozen=True)
class PickContext:
    """What rules other than C and PPL read: the selected query ids (in the order of a trial's
    answers), the sources' majority answers from the selection, the answer mode, the λ range."""

    selected: Sequence[str] = ()
    sources: Mapping[str, Mapping[str, Optional[str]]] = field(default_factory=dict)
    mode: str = "math"
    bounds: tuple[float, float] = (0.5, 2.0)


Rule = Callable[[Sequence[Point], PickContext], list[Point]]
PICK_RULES: Registry[Rule] = Registry("pick rule")


def by_consistency(p: Point) -> tuple:
    return (-p.consistency, p.perplexity, p.number)


@PICK_RULES.register("max_consistency")
def max_consistency(points: Sequence[Point], context: PickContext) -> list[Point]:
    return sorted(points, key=by_consistency)


@PICK_RULES.register("knee")
def knee(points: Sequence[Point], context: PickContext) -> list[Point]:
    return by_knee(pareto_front(points))


def agreement_of(p: Point, context: PickContext) -> float:
    """mean over sources of the share of selected queries where p's majority answer is the source's."""
    if not p.answers or len(p.answers) != len(context.selected) or not context.sources:
        return 0.0
    mine = dict(zip(context.selected, p.answers))
    same = same_answer(context.mode)
    ids = [q for q in context.selected if all(q in s for s in context.sources.values())]
    if not ids:
        return 0.0
    return sum(agreement(mine, s, ids, same) for s in context.sources.values()) / len(context.sources)


@PICK_RULES.register("agreement")
def agreement_rule(points: Sequence[Point], context: PickContext) -> list[Point]:
    if not context.sources:
        raise DotsError(
            "pick=agreement needs the sources' answers from the selection (selection.strategy other than random)"
        )
    return sorted(pareto_front(points), key=lambda p: (-agreement_of(p, context), *by_consistency(p)))


def smoother_of(points: Sequence[Point], context: PickContext) -> Smoothed:
    """The smoothed C (dots.search.pick.smoothing) fitted to `points`."""
    low, high = context.bounds
    return fit_smoother([flat_coefficients(p.params) for p in points], [p.consistency for p in points], low, high)


@PICK_RULES.register("smoothed")
def smoothed(points: Sequence[Point], context: PickContext) -> list[Point]:
    surrogate = smoother_of(points, context)
    value = {p.number: surrogate.at(flat_coefficients(p.params))[0] for p in points}
    return sorted(points, key=lambda p: (-value[p.number], p.perplexity, p.number))


def rank(rule: str, points: Sequence[Point], context: PickContext | None = None) -> list[Point]:
    """The candidates of `rule` among the complete trials `points`, best first."""
    if not points:
        raise DotsError("no complete trial to pick from")
    return PICK_RULES.lookup(rule)(points, context or PickContext())


def uncertainty(p: Point, rule: str, points: Sequence[Point], context: PickContext) -> dict:
    """The pick's C with a 95% interval: over its queries (mean ± 1.96·sd/√n of the per-query
    consistencies), and for `smoothed` the surrogate's Ĉ ± 1.96·se too."""
    out: dict = {"consistency": p.consistency, "from": "search"}
    if p.per_query:
        out.update(interval=interval_of(p.per_query), queries=len(p.per_query))
    if rule == "smoothed":
        surrogate = smoother_of(points, context)
        value, se = surrogate.at(flat_coefficients(p.params))
        out["smoothed"] = {
            "consistency": value,
            "interval": [value - 1.96 * se, value + 1.96 * se],
            "bandwidth": surrogate.bandwidth,
        }
    return out
