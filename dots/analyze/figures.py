"""Figures of the task-vector analysis, drawn from analysis.json (matplotlib, Agg).

norms_per_layer.png      DoTS Fig. 1a: layer-wise ‖τ‖₂ per source, norm ratio.
sign_interference.png    DoTS Fig. 1b: conflict vs SFT retention against top-k RLVR.
module_activation.png    DoTS Fig. 1c / Tab. 12: share of each module class in the top-k.
sparsity.png             update sparsity per layer and per module class (seeds 000/002/003).
overlap.png              RAM Fig. 2: density per source; changed entries by # of others.
regions.png              SAR Fig. 7 + Fig. 3: conflict/agree/private/unchanged; layer cosine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dots.io.commit import atomic_file  # noqa: E402

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
MODULE_LABELS = {
    "attention": "Attention",
    "mlp": "MLP",
    "norm": "Norm",
    "embedding": "Embed",
    "lm_head": "LM head",
    "other": "Other",
}


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def _layer_axis(ax) -> None:
    ax.set_xlabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _layers(values: list) -> tuple[list[int], list[float]]:
    pairs = [(i, v) for i, v in enumerate(values) if v is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _grouped_bars(ax, categories: list[str], series: dict[str, list[float | None]], percent: bool = True) -> None:
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (label, values) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(categories))]
        ys = [(v or 0.0) * (100 if percent else 1) for v in values]
        bars = ax.bar(xs, ys, width, label=label, color=_color(i))
        for bar, y in zip(bars, ys):
            ax.annotate(
                f"{y:.2f}" if percent else f"{y:.3g}",
                (bar.get_x() + bar.get_width() / 2, y),
                ha="center",
                va="bottom",
                fontsize=7 if n <= 2 else 6,
                xytext=(0, 1),
                textcoords="offset points",
                rotation=0 if n <= 2 else 90,
            )
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories)
    top = max([(v or 0.0) * (100 if percent else 1) for vs in series.values() for v in vs] + [1e-9])
    ax.set_ylim(0, top * (1.3 if n <= 2 else 1.45))


def norms_figure(report: dict, path: Path) -> Path:
    norms = report["norms"]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    values = []
    for i, (key, series) in enumerate(norms["per_layer"].items()):
        xs, ys = _layers(series)
        values += ys
        ax.plot(xs, ys, marker="o", ms=3, label=f"{key} (‖τ‖₂ = {norms['global'][key]:.3g})", color=_color(i))
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")
    _layer_axis(ax)
    ax.set_ylabel("L2 norm of τ in the layer")
    title = "Layer-wise L2 norm of each task vector"
    ratio = norms.get("ratio")
    if ratio and ratio.get("global"):
        title += f"\n‖τ_{ratio['numerator']}‖ / ‖τ_{ratio['denominator']}‖ = {ratio['global']:.2f}×"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def sign_interference_figure(report: dict, path: Path) -> Path:
    si = report["sign_interference"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r * 100 for r in si["retentions"]]
    ys = [(c or 0.0) * 100 for c in si["conflict"]]
    ax.bar(xs, ys, width=6, color=_color(0))
    for x, y in zip(xs, ys):
        ax.annotate(f"{y:.1f}", (x, y), ha="center", va="bottom", fontsize=8, xytext=(0, 1), textcoords="offset points")
    raw = si["raw"]["fraction"]
    if raw is not None:
        ax.axhline(
            raw * 100, color=_color(1), ls="--", lw=1, label=f"raw: {raw * 100:.2f}% opposite among entries both change"
        )
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlabel(f"{si['sft']} retention (% of entries kept, global top-k by |τ|)")
    ax.set_ylabel(f"% of kept {si['rlvr']} entries with opposite sign")
    ax.set_title(
        f"Sign interference: {si['sft']} at each retention vs top-{si['rlvr_fraction'] * 100:g}% {si['rlvr']}",
        fontsize=10,
    )
    ax.set_xticks(xs)
    ax.set_ylim(0, max(ys + [(raw or 0) * 100]) * 1.25 + 1)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def module_activation_figure(report: dict, path: Path) -> Path:
    ma = report["module_activation"]
    modules = list(next(iter(ma["share_of_module"].values())).keys())
    fig, ax = plt.subplots(figsize=(7.5, 4))
    series = {k: [v[m] for m in modules] for k, v in ma["share_of_module"].items()}
    _grouped_bars(ax, [MODULE_LABELS.get(m, m) for m in modules], series)
    ax.axhline(ma["fraction"] * 100, color="gray", ls=":", lw=1, label=f"uniform ({ma['fraction'] * 100:g}%)")
    ax.set_ylabel(f"% of the module's parameters in the global top-{ma['fraction'] * 100:g}%")
    ax.set_title("Module-wise distribution of activated (top-k) parameters", fontsize=10)
    ax.legend(fontsize=8, ncol=len(series) + 1, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def sparsity_figure(report: dict, path: Path) -> Path:
    sp = report["sparsity"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1.3, 1]})
    for i, (key, series) in enumerate(sp["per_layer"].items()):
        xs, ys = _layers(series)
        ax1.plot(
            xs,
            [y * 100 for y in ys],
            marker="o",
            ms=3,
            color=_color(i),
            label=f"{key} (overall {sp['overall'][key] * 100:.2f}%)",
        )
        if sp.get("relative"):
            xs, ys = _layers(sp["relative"]["per_layer"][key])
            ax1.plot(
                xs,
                [y * 100 for y in ys],
                ls="--",
                color=_color(i),
                label=f"{key}, |τ| ≤ {sp['relative']['relative_eps']:g}·max",
            )
    _layer_axis(ax1)
    ax1.set_ylabel(f"sparsity (% with |τ| ≤ {sp['eps']:g})")
    ax1.set_title("Update sparsity per layer", fontsize=10)
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    modules = list(next(iter(sp["by_module"].values())).keys())
    series = {k: [v[m] for m in modules] for k, v in sp["by_module"].items()}
    _grouped_bars(ax2, [MODULE_LABELS.get(m, m) for m in modules], series)
    ax2.set_ylabel("sparsity (%)")
    ax2.legend(fontsize=8, ncol=len(series), loc="upper center")
    ax2.set_title("Update sparsity per module class", fontsize=10)
    ax2.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def overlap_figure(report: dict, path: Path) -> Path:
    ov = report["overlap"]["sources"]
    keys = list(ov)
    density = [1.0 - report["sparsity"]["overall"][k] for k in keys]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    bars = ax1.bar(keys, [d * 100 for d in density], color=[_color(i) for i in range(len(keys))])
    for bar, d in zip(bars, density):
        ax1.annotate(
            f"{d * 100:.2f}%", (bar.get_x() + bar.get_width() / 2, d * 100), ha="center", va="bottom", fontsize=8
        )
    ax1.set_ylabel(f"density (% with |τ| > {report['overlap']['eps']:g})")
    ax1.set_title("Density of each task vector", fontsize=10)
    bottoms = [0.0] * len(keys)
    for j in range(len(keys)):
        ys = [(ov[k]["histogram"][j] or 0.0) * 100 for k in keys]
        label = "unique (w. 0)" if j == 0 else f"shared with {j} other{'s' if j > 1 else ''}"
        ax2.bar(keys, ys, bottom=bottoms, label=label, color=_color(j + 2))
        for x, (y, b) in enumerate(zip(ys, bottoms)):
            if y > 4:
                ax2.text(x, b + y / 2, f"{y:.1f}%", ha="center", va="center", fontsize=8, color="white")
        bottoms = [b + y for b, y in zip(bottoms, ys)]
    ax2.set_ylabel("% of the source's changed entries")
    ax2.set_title("Changed entries by how many other sources changed them", fontsize=10)
    ax2.legend(fontsize=8, ncol=len(keys), loc="upper center", bbox_to_anchor=(0.5, -0.08))
    return _save(fig, path)


def regions_figure(report: dict, path: Path) -> Path:
    pairs = report["pairs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, max(3.5, 1.0 + 0.6 * len(pairs))))
    parts = [("conflict", "#d62728"), ("agree", "#2ca02c"), ("private", "#1f77b4"), ("unchanged", "#bbbbbb")]
    labels = list(pairs)
    lefts = [0.0] * len(labels)
    for part, color in parts:
        ws = [pairs[p]["regions"][part] * 100 for p in labels]
        ax1.barh(labels, ws, left=lefts, color=color, label=part, height=0.5)
        for y, (w, left) in enumerate(zip(ws, lefts)):
            if w > 6:
                ax1.text(left + w / 2, y, f"{w:.1f}%", ha="center", va="center", fontsize=8)
        lefts = [a + b for a, b in zip(lefts, ws)]
    ax1.set_xlabel(f"% of all parameters (changed: |τ| > {report['overlap']['eps']:g})")
    ax1.set_title("Update regions of each pair (SAR)", fontsize=10)
    ax1.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax1.set_xlim(0, 100)
    for i, p in enumerate(labels):
        xs, ys = _layers(pairs[p]["cosine_per_layer"])
        ax2.plot(xs, ys, marker="o", ms=3, color=_color(i), label=f"{p} (global {pairs[p]['cosine']:.3f})")
    ax2.axhline(0, color="gray", lw=0.8)
    ax2.set_ylim(-1.05, 1.05)
    _layer_axis(ax2)
    ax2.set_ylabel("cosine(τ_a, τ_b) in the layer")
    ax2.set_title("Layer-wise cosine similarity of updates", fontsize=10)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    return _save(fig, path)


FIGURES: dict[str, tuple[Callable[[dict, Path], Path], Callable[[dict], bool]]] = {
    "norms_per_layer.png": (norms_figure, lambda r: True),
    "sign_interference.png": (sign_interference_figure, lambda r: r.get("sign_interference") is not None),
    "module_activation.png": (module_activation_figure, lambda r: True),
    "sparsity.png": (sparsity_figure, lambda r: True),
    "overlap.png": (overlap_figure, lambda r: len(r["sources"]) >= 2),
    "regions.png": (regions_figure, lambda r: bool(r["pairs"])),
}


def draw_all(report: dict, out_dir: str | os.PathLike, only_missing: bool = False) -> list[Path]:
    """Draw every figure the report has data for into `out_dir`; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, (draw, applies) in FIGURES.items():
        path = out / name
        if not applies(report):
            continue
        if only_missing and path.exists():
            drawn.append(path)
            continue
        drawn.append(draw(report, path))
    return drawn
