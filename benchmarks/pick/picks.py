"""The pick rules of benchmarks/pick/study.py applied after the fact (max_consistency, agreement,
consensus, guarded, away), stopping replayed with dots' own rule, and the statistics of the
report (paired differences with a bootstrap interval, Spearman's ρ, medians)."""

from __future__ import annotations

import random
import statistics
from typing import Any, Sequence

RULES = ("max_consistency", "agreement", "consensus", "guarded", "away")


STOP = {"window": 10, "threshold": 0.01}  # dots' search.stop defaults


def agreement_with(answers: list | None, ids: list[str], sources: dict[str, dict]) -> float | None:
    """Mean over sources of the share of selected queries where the answers agree (diagnosis.agreement)."""
    from dots.search.pick.diagnosis import agreement, same_answer

    if not answers or not sources:
        return None
    mine = dict(zip(ids, answers))
    common = [q for q in ids if all(q in s for s in sources.values())]
    same = same_answer("math")
    return sum(agreement(mine, s, common, same) for s in sources.values()) / len(sources)


def consensus_with(answers: list | None, ids: list[str], sources: dict[str, dict]) -> float | None:
    """Share of the queries where the sources' majority answers agree on which the model's agrees too."""
    from dots.search.pick.diagnosis import same_answer

    if not answers or len(sources) < 2:
        return None
    same = same_answer("math")
    a, b = list(sources.values())[:2]
    both = [q for q in ids if a.get(q) is not None and b.get(q) is not None and same(a[q], b[q])]
    mine = dict(zip(ids, answers))
    return sum(mine.get(q) is not None and same(mine[q], a[q]) for q in both) / len(both) if both else None


def source_rate(ids: list[str], sources: dict[str, dict]) -> float:
    from dots.search.pick.diagnosis import agreement, same_answer

    a, b = list(sources.values())[:2]
    common = [q for q in ids if q in a and q in b]
    return agreement(a, b, common, same_answer("math"))


def front_of(trials: list[dict]) -> list[dict]:
    from dots.search.pick.pareto import Point, pareto_front

    pts = [Point(t["number"], t["consistency"], t["perplexity"], t["params"]) for t in trials if t["complete"]]
    keep = {p.number for p in pareto_front(pts)}
    return [t for t in trials if t["number"] in keep]


def pick_by(trials: list[dict], rule: str, ids: list[str], sources: dict[str, dict], pair_rate: float) -> dict:
    """The trial a pick rule takes from `trials` (see the module docstring)."""
    if rule == "away":
        inside = [t for t in trials if min(t["params"].values()) >= 0.5]
        trials = inside or trials
    front = front_of(trials)
    best_c = min(front, key=lambda t: (-t["consistency"], t["perplexity"], t["number"]))
    if rule in ("max_consistency", "away"):
        return best_c

    def agree(t: dict) -> float:
        return agreement_with(t["answers"], ids, sources) or 0.0

    if rule == "consensus":
        return min(
            front,
            key=lambda t: (-(consensus_with(t["answers"], ids, sources) or 0.0), -t["consistency"], t["number"]),
        )
    most = min(front, key=lambda t: (-agree(t), -t["consistency"], t["perplexity"], t["number"]))
    if rule == "agreement":
        return most
    return most if agree(best_c) < pair_rate else best_c  # guarded


def stop_at(trials: list[dict]) -> int:
    """How many scored trials a study with search.stop (rule hypervolume, dots' defaults) keeps."""
    from dots.search.study.stopping import relative_gain

    history = [(t["consistency"], t["perplexity"]) if t["complete"] else None for t in trials]
    for n in range(2 * STOP["window"], len(history) + 1):
        if relative_gain(history[:n], STOP["window"]) <= STOP["threshold"]:
            return n
    return len(history)


def fixed_from(trials: list[dict], pick: Any) -> int:
    """The number of trials after which the pick (a function of a prefix) no longer changed."""
    final = pick(trials)["number"]
    n = len(trials)
    while n > 1 and any(t["complete"] for t in trials[: n - 1]) and pick(trials[: n - 1])["number"] == final:
        n -= 1
    return n


def interval(diffs: Sequence[float], reps: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of paired differences with a 95% bootstrap percentile interval."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(reps))
    return statistics.mean(diffs), means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else 0.0


def fmt_ci(diffs: Sequence[float]) -> str:
    if not diffs:
        return "—"
    m, lo, hi = interval(diffs)  # accuracy differences, in points (%)
    return f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def paired(labs: dict[int, dict], a: tuple[str, str], b: tuple[str, str]) -> list[float]:
    """gt(b) − gt(a) over the (lab, seed) runs both have; a, b = (config, rule or 'stop')."""
    diffs = []
    for rep in labs.values():
        by = {(r["config"], r["seed"]): r for r in rep["runs"]}
        for (cfg, seed), r in by.items():
            if cfg == b[0] and (a[0], seed) in by:
                diffs.append(r[b[1]]["gt"] - by[(a[0], seed)][a[1]]["gt"])
    return diffs


def best_source(rep: dict) -> float:
    return max(rep["models"]["sft"], rep["models"]["rlvr"])


def surrogate_maximum(trials: list[dict]) -> tuple[dict[str, float], float]:
    """The λ of the highest smoothed C over a 31 × 31 grid of the search range [0.5, 2]², and that C."""
    from dots.search.pick.smoothing import fit_smoother

    done = [t for t in trials if t["complete"]]
    fit = fit_smoother(
        [[t["params"]["sft"], t["params"]["rlvr"]] for t in done], [t["consistency"] for t in done], 0.5, 2.0
    )
    axis = [0.5 + 1.5 * i / 30 for i in range(31)]
    a, b = max(((a, b) for a in axis for b in axis), key=lambda p: fit.at(p)[0])
    return {"sft": a, "rlvr": b}, fit.at((a, b))[0]
