"""The λ landscape (landscape.png beside pareto.png): where the good merges are, and how sure the pick is.

Every complete trial in λ space coloured by its consistency, the Pareto front ringed, the pick
starred, and the confirmation's candidates with their 95% intervals. Two coordinates (two
sources): a map, over the smoothed C (dots.search.pick.smoothing) as a shaded background; one:
C against λ with the smoothed curve; three or four: a panel per pair; more (module granularity):
the two leading principal directions of the trials' λ. Everything drawn is computed from
trials.csv (and result.yaml's confirmation), so `python -m dots.search.pick.landscape RUN_DIR`
draws the same picture again from those files.
"""

from __future__ import annotations

import csv
import itertools
import math
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

from dots.io.commit import atomic_file
from dots.search.pick.diagnosis import flat_coefficients
from dots.search.pick.pareto import Point, pareto_front
from dots.search.pick.smoothing import fit_smoother

__all__ = ["Landscape", "landscape_figure", "landscape_from_run", "plot_landscape"]


class Landscape:
    """The picture's numbers: the trials' λ vectors (`names` their coordinates), C, which are on
    the front, which is the pick, and the confirmation's rows (trial, C, interval)."""

    def __init__(
        self,
        names: Sequence[str],
        lams: Sequence[Sequence[float]],
        c: Sequence[float],
        numbers: Sequence[int],
        front: set[int],
        pick: int | None,
        bounds: tuple[float, float],
        confirmed: Sequence[dict] = (),
        uncertainty: dict | None = None,
    ):
        self.names, self.lams, self.c, self.numbers = list(names), [list(x) for x in lams], list(c), list(numbers)
        self.front, self.pick, self.bounds, self.confirmed = front, pick, bounds, list(confirmed)
        self.uncertainty = uncertainty or {}  # result.yaml's: the pick's C and its 95% interval

    def pick_label(self) -> str:
        sure = self.uncertainty
        if "interval" not in sure:
            return "pick"
        lo, hi = sure["interval"]
        how = " (confirmed)" if sure.get("from") == "confirmation" else ""
        return f"pick: C {sure['consistency']:.3f} [{lo:.3f}, {hi:.3f}]{how}"

    def smoother(self) -> Any:
        return fit_smoother(self.lams, self.c, *self.bounds) if self.lams else None


def coordinate_names(params: Any, prefix: str = "") -> list[str]:
    names: list[str] = []
    for key, value in params.items():
        names += coordinate_names(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
    return names


def plot_landscape(
    points: Sequence[Point],
    front: Sequence[Point],
    chosen: Point,
    path: Path,
    bounds: tuple[float, float],
    confirmation: dict | None = None,
    title: str = "",
    uncertainty: dict | None = None,
) -> None:
    """landscape.png of a search (see the module docstring)."""
    import matplotlib.pyplot as plt

    land = Landscape(
        coordinate_names(dict(chosen.params)), [flat_coefficients(p.params) for p in points],
        [p.consistency for p in points], [p.number for p in points], {p.number for p in front},
        chosen.number, bounds, (confirmation or {}).get("points", ()), uncertainty,
    )  # fmt: skip
    fig = landscape_figure(land, title)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def landscape_figure(land: Landscape, title: str = "") -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = len(land.names)
    pairs = list(itertools.combinations(range(dims), 2)) if 3 <= dims <= 4 else [(0, 1)]
    fig, axes = plt.subplots(
        1, len(pairs), figsize=(5.6 * len(pairs) if dims != 1 else 6.4, 5.0), dpi=120, layout="constrained"
    )
    axes = list(axes) if len(pairs) > 1 else [axes]
    c_lo, c_hi = (min(land.c), max(land.c)) if land.c else (0.0, 1.0)
    norm = matplotlib.colors.Normalize(vmin=c_lo, vmax=max(c_hi, c_lo + 1e-6))
    for ax, (i, j) in zip(axes, pairs):
        if dims == 1:
            draw_curve(ax, land, norm)
        else:
            draw_map(ax, land, norm, (i, j) if dims <= 4 else None)
    scatter = matplotlib.cm.ScalarMappable(norm=norm, cmap="viridis")
    fig.colorbar(scatter, ax=axes, label="consistency C (higher is better)")
    shading = "; shading: the smoothed C" if dims == 2 and len(land.lams) >= 3 else ""
    heading = f"{title}: " if title else ""
    how = "consistency C (majority share of k samples, mean over queries)"
    what = f"{heading}each trial's λ, coloured by its {how}{shading}"
    fig.suptitle("\n".join(textwrap.wrap(what, 90)), fontsize=9)
    if dims == 2 and land.confirmed:  # the candidates' numbers, once the layout is settled
        fig.canvas.draw()
        fig.set_layout_engine("none")
        name_candidates(axes[0], land, land.lams)
    return fig


def principal(land: Landscape) -> tuple[list[list[float]], list[str]]:
    """The trials' λ on their two leading principal directions (module granularity)."""
    import numpy as np

    x = np.asarray(land.lams, dtype=float)
    centred = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    share = (s**2 / max(float((s**2).sum()), 1e-12))[:2]
    xy = centred @ vt[:2].T
    labels = [f"direction {k + 1} ({share[k]:.0%} of the λ variance)" for k in range(min(2, len(share)))]
    return xy.tolist(), labels


def draw_map(ax: Any, land: Landscape, norm: Any, pair: tuple[int, int] | None) -> None:
    """Trials on two coordinates (or principal directions), the smoothed C behind them when the
    two coordinates are all there is."""
    import numpy as np

    if pair is None:
        xy, labels = principal(land)
    else:
        xy = [[x[pair[0]], x[pair[1]]] for x in land.lams]
        labels = [f"λ {land.names[pair[0]]}", f"λ {land.names[pair[1]]}"]
    if len(land.names) == 2 and len(land.lams) >= 3:
        low, high = land.bounds
        grid = np.linspace(low, high, 48)
        surrogate = land.smoother()
        z = [[surrogate.at([a, b])[0] for a in grid] for b in grid]
        ax.contourf(grid, grid, z, levels=14, cmap="viridis", norm=norm, alpha=0.45)
        pad = 0.03 * (high - low)
        ax.set_xlim(low - pad, high + pad)
        ax.set_ylim(low - pad, high + pad)
    marks(ax, land, [p[0] for p in xy], [p[1] for p in xy], norm)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1] if len(labels) > 1 else "")
    if len(land.names) == 2 and land.confirmed:  # the candidates' intervals above (their numbers: name_candidates)
        shown = [row for row in land.confirmed if row["trial"] in land.numbers]
        cells = [f"#{r['trial']} {r['consistency']:.3f} [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}]"
                 for r in shown]  # fmt: skip
        whole = [c.replace(" ", "\u00a0") for c in cells]  # a line breaks between candidates, not inside one
        ax.set_title("\n".join(textwrap.wrap("confirmed C, 95% interval: " + ";  ".join(whole), 72)), fontsize=7)


def name_candidates(ax: Any, land: Landscape, xy: Sequence[Sequence[float]]) -> None:
    """Each confirmed candidate's number beside its square, at the nearest spot (rings of offsets
    around the point) where the label stays inside the axes and clear of every marker and label."""
    import math

    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = marker_boxes(ax)
    for row in land.confirmed:
        if row["trial"] not in land.numbers:
            continue
        anchor = tuple(xy[land.numbers.index(row["trial"])])
        for radius, turn in itertools.product((12, 20, 30, 42, 56, 72), range(16)):
            angle = 2 * math.pi * turn / 16
            label = ax.annotate(
                f"#{row['trial']}", anchor, xytext=(radius * math.cos(angle), radius * math.sin(angle)),
                textcoords="offset points", fontsize=7, ha="center", va="center", zorder=6,
                arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "tab:orange", "shrinkA": 0, "shrinkB": 4},
            )  # fmt: skip
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer).expanded(1.15, 1.3)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            label.remove()


def marker_boxes(ax: Any) -> list[Any]:
    """The display-space box of every scatter marker drawn on `ax` (its size in points², as `s`)."""
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    boxes = []
    to_pixels = ax.figure.dpi / 72
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets()) if isinstance(collection, PathCollection) else np.empty((0, 2))
        if not len(offsets):
            continue
        sizes = collection.get_sizes()
        centres = collection.get_offset_transform().transform(offsets)
        for k, (x, y) in enumerate(centres):
            half = math.sqrt(sizes[k % len(sizes)]) / 2 * to_pixels
            boxes.append(Bbox([[x - half, y - half], [x + half, y + half]]))
    return boxes


def draw_curve(ax: Any, land: Landscape, norm: Any) -> None:
    """One coordinate: C against λ, the smoothed curve, the confirmed candidates' intervals."""
    import numpy as np

    xs = [x[0] for x in land.lams]
    if len(xs) >= 3:
        grid = np.linspace(*land.bounds, 120)
        surrogate = land.smoother()
        ax.plot(grid, [surrogate.at([g])[0] for g in grid], color="gray", lw=1.2, label="smoothed C")
    marks(ax, land, xs, land.c, norm)
    for row in land.confirmed:
        lo, hi = row["interval"]
        x = flat_coefficients(row["coefficients"])[0]
        ax.errorbar([x], [row["consistency"]], yerr=[[row["consistency"] - lo], [hi - row["consistency"]]],
                    fmt="s", color="tab:orange", ms=4, capsize=3)  # fmt: skip
    ax.set_xlabel(f"λ {land.names[0]}")
    ax.set_ylabel("consistency C")


def marks(ax: Any, land: Landscape, xs: Sequence[float], ys: Sequence[float], norm: Any) -> None:
    """The trials (coloured by C), the front ringed, the pick starred, the confirmed squared."""
    ax.scatter(xs, ys, c=land.c, cmap="viridis", norm=norm, s=26, edgecolors="black", linewidths=0.3, zorder=3,
               clip_on=False)  # fmt: skip
    on_front = [k for k, n in enumerate(land.numbers) if n in land.front]
    ax.scatter([xs[k] for k in on_front], [ys[k] for k in on_front], s=60, facecolors="none",
               edgecolors="tab:red", linewidths=1.3, zorder=4, label="Pareto front")  # fmt: skip
    confirmed = {row["trial"] for row in land.confirmed}
    shown = [k for k, n in enumerate(land.numbers) if n in confirmed]
    if shown:
        ax.scatter([xs[k] for k in shown], [ys[k] for k in shown], s=64, marker="s", facecolors="none",
                   edgecolors="tab:orange", linewidths=1.2, zorder=4, label="confirmed (fresh samples)")  # fmt: skip
    if land.pick in land.numbers:
        k = land.numbers.index(land.pick)
        ax.scatter([xs[k]], [ys[k]], marker="*", s=150, color="gold", edgecolor="black", zorder=5,
                   label=land.pick_label())  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)  # off the data


def landscape_from_run(run_dir: Path) -> Landscape:
    """The picture's numbers read back from a run's trials.csv and result.yaml."""
    import yaml

    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    with open(run_dir / "trials.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["state"] == "COMPLETE"]
    names = [k for k in rows[0] if k.startswith("lambda_")] if rows else []
    lams = [[float(r[k]) for k in names] for r in rows]
    c = [float(r["consistency"]) for r in rows]
    numbers = [int(r["number"]) for r in rows]
    points = [Point(n, ci, float(r["perplexity"]), {}) for n, ci, r in zip(numbers, c, rows)]
    front = {p.number for p in pareto_front(points)}
    bounds = tuple(result.get("range") or (min(map(min, lams)), max(map(max, lams))))
    confirmed = (result.get("confirmation") or {}).get("points", ())
    return Landscape([n.removeprefix("lambda_") for n in names], lams, c, numbers, front, result["trial"],
                     (float(bounds[0]), float(bounds[1])), confirmed, result.get("uncertainty"))  # fmt: skip


if __name__ == "__main__":  # python -m dots.search.pick.landscape RUN_DIR [OUT.png]
    import matplotlib.pyplot as plt

    run = Path(sys.argv[1])
    figure = landscape_figure(landscape_from_run(run))
    figure.savefig(sys.argv[2] if len(sys.argv) > 2 else run / "landscape.png")
    plt.close(figure)
