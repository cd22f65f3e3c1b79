"""Stopping a converged study before search.n_trials (`search.stop`, on by default: docs/cost.md).

`rule: hypervolume` stops when the last `window` scored trials (complete, or pruned by the
bound: dots.search.study.pruning) added at most `threshold` of the front's hypervolume:

    (HV(front of all n) − HV(front of the first n − window)) / HV(front of all n) ≤ threshold,

checked once the study holds at least 2·window scored trials, in the order they finished.
Both objectives are put in minimisation form (1 − C, log PPL: perplexity is a ratio scale) and
min–max normalised over the complete trials so far, so the rule does not depend on the units;
the reference point is 1.1 on each normalised axis (the nadir plus a tenth of the span, the
usual choice so that the front's extreme points still count). Once it fires the verdict is
kept in the study (user attribute STOPPED), so a resume and the other workers stop too; a
rerun with `search.stop.rule=none` continues the study to search.n_trials.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

from dots.options.study import StopRule

__all__ = ["STOPPED", "StopRule", "hypervolume", "normalised", "relative_gain", "stop_reason"]

log = logging.getLogger("dots.search")

STOPPED = "dots_stopped"  # study user attribute: why and when the study stopped
REFERENCE = 1.1  # the reference point on each normalised axis


def hypervolume(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """The area dominated by 2-D minimisation `points` and bounded by `reference` (exact)."""
    inside = sorted((x, y) for x, y in points if x < reference[0] and y < reference[1])
    area, best_y = 0.0, reference[1]
    for i, (x, y) in enumerate(inside):
        if y < best_y:  # on the front of the points so far (sorted by x)
            nxt = next((x2 for x2, y2 in inside[i + 1 :] if y2 < y), reference[0])
            area += (nxt - x) * (reference[1] - y)
            best_y = y
    return area


def normalised(values: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(C, PPL) pairs as min–max normalised minimisation objectives (1 − C, log PPL)."""
    raw = [(1.0 - c, math.log(p) if p > 0 else -math.inf) for c, p in values]
    spans = []
    for axis in (0, 1):
        lo, hi = min(v[axis] for v in raw), max(v[axis] for v in raw)
        spans.append((lo, hi - lo if hi > lo else 1.0))
    return [((a - spans[0][0]) / spans[0][1], (b - spans[1][0]) / spans[1][1]) for a, b in raw]


def relative_gain(history: Sequence[tuple[float, float] | None], window: int) -> float:
    """The share of the hypervolume added by the last `window` entries of `history` (scored
    trials in finishing order: (C, PPL), or None for a trial pruned by the bound)."""
    points = [p for p in history if p is not None and all(math.isfinite(v) for v in p)]
    if not points:
        return 0.0
    norm = dict(zip(range(len(points)), normalised(points)))
    before_n = sum(p is not None and all(math.isfinite(v) for v in p) for p in history[: len(history) - window])
    ref = (REFERENCE, REFERENCE)
    now = hypervolume(list(norm.values()), ref)
    before = hypervolume([norm[i] for i in range(before_n)], ref)
    return (now - before) / now if now > 0 else 0.0


def scored_history(study: Any) -> list[tuple[float, float] | None]:
    """The study's scored trials in the order they finished: (C, PPL), or None when pruned."""
    from optuna.trial import TrialState

    from dots.search.study.pruning import is_bound_pruned

    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if t.state == TrialState.COMPLETE or is_bound_pruned(t)
    ]
    trials.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
    return [(t.values[0], t.values[1]) if t.state == TrialState.COMPLETE else None for t in trials]


def stop_reason(study: Any, rule: StopRule | None) -> str | None:
    """Why the study should stop asking for trials now (also recorded in the study), else None."""
    if rule is None or rule.rule == "none":
        return None
    stopped = study.user_attrs.get(STOPPED)
    if stopped:
        return str(stopped["reason"])
    history = scored_history(study)
    window = int(rule.window)
    if len(history) < 2 * window:
        return None
    gain = relative_gain(history, window)
    if gain > float(rule.threshold):
        return None
    reason = (
        f"search stopped after {len(history)} scored trials: the last {window} added "
        f"{100 * gain:.2f}% of the front's hypervolume (threshold {100 * float(rule.threshold):.2f}%)"
    )
    study.set_user_attr(STOPPED, {"reason": reason, "rule": rule.rule, "trials": len(history), "gain": gain})
    return reason
