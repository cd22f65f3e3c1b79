"""Pareto front of (consistency ↑, perplexity ↓), the pick rules (App. A.2), and plots."""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from dots.errors import DotsError
from dots.io.commit import atomic_file
from dots.vectors.coefficients import Coefficients, format_coefficients

__all__ = ["Point", "by_knee", "front_figure", "pareto_front", "pick", "plot_front", "run_points", "write_trials_csv"]

PICKS = ("max_consistency", "knee")


@dataclass(frozen=True)
class Point:
    number: int
    consistency: float
    perplexity: float
    params: Coefficients  # λ per source, or per source and module group
    answers: tuple[str | None, ...] | None = None  # each selected query's majority answer
    per_query: tuple[float, ...] | None = None  # each selected query's consistency


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """Points not dominated by another (higher-or-equal C and lower-or-equal PPL, one strictly)."""
    front = []
    for p in points:
        dominated = any(
            (q.consistency >= p.consistency and q.perplexity <= p.perplexity)
            and (q.consistency > p.consistency or q.perplexity < p.perplexity)
            for q in points
        )
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: (-p.consistency, p.perplexity, p.number))


def pick(front: Sequence[Point], rule: str) -> Point:
    """The front-only rules (no default: a search's pick is `pick`, smoothed by default, through
    dots.search.pick.rules). max_consistency: highest C, ties → lower PPL (then the earlier trial).
    knee: min-max normalise both objectives over the front and take the point nearest to
    the ideal (max C, min PPL) in Euclidean distance."""
    if not front:
        raise DotsError("no complete trial to pick from")
    if rule == "max_consistency":
        return min(front, key=lambda p: (-p.consistency, p.perplexity, p.number))
    if rule == "knee":
        return by_knee(front)[0]
    raise DotsError(f"unknown pick rule {rule!r}; choose one of {', '.join(PICKS)}")


def by_knee(front: Sequence[Point]) -> list[Point]:
    """The front by distance to the ideal (max C, min PPL) after min-max scaling each objective
    over the front, nearest first (ties → higher C, then the earlier trial)."""
    cs = [p.consistency for p in front]
    ps = [p.perplexity for p in front]
    c_lo, c_hi, p_lo, p_hi = min(cs), max(cs), min(ps), max(ps)

    def distance(p: Point) -> float:
        dc = 0.0 if c_hi == c_lo else (c_hi - p.consistency) / (c_hi - c_lo)
        dp = 0.0 if p_hi == p_lo else (p.perplexity - p_lo) / (p_hi - p_lo)
        return math.hypot(dc, dp)

    return sorted(front, key=lambda p: (distance(p), -p.consistency, p.number))


def write_trials_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    with atomic_file(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def coincident(points: Sequence[Point]) -> dict[tuple[float, float], list[int]]:
    """Trial numbers of points that share their (perplexity, consistency) with another trial."""
    groups: dict[tuple[float, float], list[int]] = {}
    for p in points:
        groups.setdefault((round(p.perplexity, 6), round(p.consistency, 6)), []).append(p.number)
    return {xy: numbers for xy, numbers in groups.items() if len(numbers) > 1}


def plot_front(points: Sequence[Point], front: Sequence[Point], chosen: Point, path: Path, title: str = "") -> None:
    """All trials (colored by trial number), the front as a line, the pick starred, saved to `path`."""
    import matplotlib.pyplot as plt

    fig = front_figure(points, front, chosen, title)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def pick_label(coefficients: Coefficients) -> str:
    """The pick's λ for the plot's legend: `sft=1.00, rlvr=0.50`, or one line per source when
    the sources have a λ per module group."""
    per_group = any(isinstance(v, Mapping) for v in coefficients.values())
    return format_coefficients(coefficients, digits=2, source_sep="\n" if per_group else ", ")


def front_figure(points: Sequence[Point], front: Sequence[Point], chosen: Point, title: str = "") -> Any:
    """The figure of `plot_front`. Points that coincide are labelled with their count (×n);
    consistency is never drawn below 0; perplexity on a log axis when it spans more than 3× (one
    bad trial would squeeze the rest into a corner); the legend below the axes, off the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=130, layout="constrained")
    sc = ax.scatter(
        [p.perplexity for p in points],
        [p.consistency for p in points],
        c=[p.number for p in points],
        cmap="viridis",
        s=22,
        alpha=0.75,
        edgecolors="black",
        linewidths=0.3,
        clip_on=False,  # points at C = 0 sit on the axis, whole
        label="trials",
    )
    for (ppl, c), numbers in coincident(points).items():
        ax.annotate(f"×{len(numbers)}", (ppl, c), xytext=(5, 4), textcoords="offset points", fontsize=7)
    fig.colorbar(sc, ax=ax, label="trial")
    f = sorted(front, key=lambda p: p.perplexity)
    ax.plot(
        [p.perplexity for p in f],
        [p.consistency for p in f],
        "-o",
        color="tab:red",
        ms=5,
        lw=1.4,
        mfc="none",
        label="Pareto front",
    )
    ax.scatter(
        [chosen.perplexity],
        [chosen.consistency],
        marker="*",
        s=260,
        color="gold",
        edgecolor="black",
        zorder=5,
        label="pick: " + pick_label(chosen.params),
    )
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, 0.0), max(high, 0.05))  # consistency lies in [0, 1]: no negative axis when all are 0
    spread = [p.perplexity for p in points]
    wide = bool(spread) and min(spread) > 0 and max(spread) > 3 * min(spread)
    if wide:  # plain numbers on the log axis: 5, 10, 20, 30 (not 2×10¹)
        ax.set_xscale("log")
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "1235" else "")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
    ax.set_xlabel("perplexity on adaptation prompts (lower is better" + ("; log scale)" if wide else ")"))
    ax.set_ylabel("mean answer consistency (higher is better)")
    ax.set_title(title or "DoTS coefficient search", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    return fig


def run_points(run_dir: Path) -> tuple[list[Point], Point, str]:
    """A run's complete trials read back from trials.csv (λ from its `lambda_*` columns), the pick
    of result.yaml and the figure's title (the backbone of config.yaml, when the run has one)."""
    import yaml

    with open(run_dir / "trials.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["state"] == "COMPLETE"]
    points = [
        Point(int(r["number"]), float(r["consistency"]), float(r["perplexity"]),
              {k.removeprefix("lambda_"): float(v) for k, v in r.items() if k.startswith("lambda_")})
        for r in rows
    ]  # fmt: skip
    trial = yaml.safe_load((run_dir / "result.yaml").read_text())["trial"]
    config = run_dir / "config.yaml"
    backbone = (yaml.safe_load(config.read_text()) or {}).get("backbone", {}) if config.is_file() else {}
    title = f"DoTS on {backbone['name']}" if isinstance(backbone, dict) and backbone.get("name") else ""
    return points, next(p for p in points if p.number == trial), title


if __name__ == "__main__":  # python -m dots.search.pick.pareto RUN_DIR [OUT.png]: pareto.png drawn again
    run = Path(sys.argv[1])
    points, chosen, title = run_points(run)
    plot_front(
        points, pareto_front(points), chosen, Path(sys.argv[2]) if len(sys.argv) > 2 else run / "pareto.png", title
    )
