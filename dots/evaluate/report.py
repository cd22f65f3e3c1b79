"""The outputs of an evaluation: scores.json, scores.md (models × benchmarks) and scores.png."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Mapping, Sequence, cast

from dots.io.commit import atomic_file, write_atomic

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


def measured(report: Mapping) -> str:
    """What each benchmark measures and how: `lab_greedy pass@1, greedy, 1024 problems`."""
    parts = []
    for name, b in report["benchmarks"].items():
        how = [b.get("metric", "")]
        if b.get("temperature") is not None:
            how.append("greedy" if not b["temperature"] else f"T = {b['temperature']:g}")
        if b.get("problems"):
            how.append(f"{b['problems']} problems")
        parts.append(f"{name} {', '.join(h for h in how if h)}".strip())
    return "; ".join(parts)


def _interval(report: Mapping, model: str, group: str, benchmarks: Sequence[str]) -> float:
    """One standard error in % of a bar (the average's: of a mean of independent scores); 0 if unknown."""
    row = report["scores"].get(model, {})
    errors = [row.get(b, {}).get("stderr") for b in (benchmarks if group == "average" else [group])]
    if any(e is None for e in errors) or not errors:
        return 0.0
    return 100 * math.sqrt(sum(e * e for e in errors)) / len(errors)


def plot_scores(report: Mapping, path: str | Path, title: str = "") -> Path:
    """Grouped bars: one group per benchmark (and the average), one bar per model at its score (%),
    ± one standard error; titled with what each benchmark measures; the legend beside the axes."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benchmarks = list(report["benchmarks"])
    models = list(report["models"])
    groups = benchmarks + (["average"] if len(benchmarks) > 1 else [])
    width = 0.8 / max(len(models), 1)
    size = (max(6.0, 1.1 * len(groups) * max(1, len(models)) * 0.45 + 2), 4.6)
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")  # one distinct colour per model
    for i, m in enumerate(models):
        heights = []
        for g in groups:
            v = report["average"].get(m) if g == "average" else report["scores"].get(m, {}).get(g, {}).get("score")
            heights.append(0.0 if v is None else 100 * v)
        errors = [_interval(report, m, g, benchmarks) for g in groups]
        xs = [j + (i - (len(models) - 1) / 2) * width for j in range(len(groups))]
        ax.bar(xs, heights, width, label=m, color=cmap(i % cmap.N), yerr=errors, capsize=2, ecolor="0.25")
        if len(groups) * len(models) <= 40:  # each value above its error bar, upright in the bar's width
            for x, h, e in zip(xs, heights, errors):
                ax.text(x, h + e + 1.5, f"{h:.1f}", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20 if len(groups) > 5 else 0)
    ax.set_ylabel("score (%), ± 1 standard error")
    ax.set_ylim(0, 118)
    what = measured(report)
    ax.set_title("\n".join(textwrap.wrap(f"{title}: {what}" if title and what else title or what, 80)), fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=130, format="png")
    plt.close(fig)
    return path


def write_json(obj: Mapping, path: str | Path) -> Path:
    """Atomic JSON write (temp file, then rename): a reader never sees half a file."""
    path = Path(path)
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
    return path


if __name__ == "__main__":  # python -m dots.evaluate.report SCORES.json [OUT.png]: scores.png drawn again
    scores = Path(sys.argv[1])
    recorded = json.loads(scores.read_text())
    plot_scores(recorded, sys.argv[2] if len(sys.argv) > 2 else scores.with_suffix(".png"), recorded.get("title", ""))
