"""The outputs of an evaluation: scores.json, scores.md (models × benchmarks) and scores.png."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Mapping, Sequence, cast

__all__ = ["plot_scores"]


def average(row: Mapping[str, Mapping], benchmarks: Sequence[str]) -> float | None:
    """Plain mean of a model's benchmark scores (the papers' Average column); None if any is missing."""
    values = [row[b]["score"] for b in benchmarks if b in row]
    if len(values) != len(benchmarks) or not values:
        return None
    return sum(values) / len(values)


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def markdown_table(report: Mapping) -> str:
    """Models as rows, benchmarks (with their metric) as columns, plus the average; the best in bold."""
    benchmarks = list(report["benchmarks"])
    models = list(report["models"])
    scores = report["scores"]
    header = ["model"] + [f"{b} ({report['benchmarks'][b]['metric']})" for b in benchmarks] + ["average"]
    columns = benchmarks + ["average"]
    value = {
        m: {**{b: scores.get(m, {}).get(b, {}).get("score") for b in benchmarks}, "average": report["average"].get(m)}
        for m in models
    }
    best = {c: max((value[m][c] for m in models if value[m][c] is not None), default=None) for c in columns}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(columns)) + "|"]
    for m in models:
        cells = []
        for c in columns:
            text = _pct(value[m][c])
            present = [value[k][c] for k in models if value[k][c] is not None]
            tied = len({round(v, 6) for v in present}) <= 1
            if value[m][c] is not None and not tied and round(value[m][c], 6) == round(cast(float, best[c]), 6):
                text = f"**{text}**"
            cells.append(text)
        lines.append("| " + " | ".join([m] + cells) + " |")
    sizes = ", ".join(
        f"{b}: {report['benchmarks'][b]['problems']} problems × {report['benchmarks'][b]['samples']} samples"
        for b in benchmarks
    )
    return "\n".join(lines) + f"\n\nScores in %. {sizes}.\n"


def plot_scores(report: Mapping, path: str | Path, title: str = "") -> Path:
    """Grouped bar chart: one group per benchmark (and the average), one bar per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benchmarks = list(report["benchmarks"])
    models = list(report["models"])
    groups = benchmarks + (["average"] if len(benchmarks) > 1 else [])
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) * max(1, len(models)) * 0.45 + 2), 4.2))
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")  # one distinct colour per model
    for i, m in enumerate(models):
        heights = []
        for g in groups:
            v = report["average"].get(m) if g == "average" else report["scores"].get(m, {}).get(g, {}).get("score")
            heights.append(0.0 if v is None else 100 * v)
        xs = [j + (i - (len(models) - 1) / 2) * width for j in range(len(groups))]
        bars = ax.bar(xs, heights, width, label=m, color=cmap(i % cmap.N))
        if len(groups) * len(models) <= 40:
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20 if len(groups) > 5 else 0)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def write_json(obj: Mapping, path: str | Path) -> Path:
    """Atomic JSON write (temp file, then rename): a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path
