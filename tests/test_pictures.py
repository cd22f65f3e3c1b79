"""The pictures a newcomer reads — pareto.png, landscape.png and evaluate's scores.png — checked for
overlaps on matplotlib's own layout: every artist's box in display space after a draw (renderer
extents), not pixels. A legend lies off the data, labels avoid each other and the markers, an
outlier does not squeeze the other trials into a corner, and each picture says what it measures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import capture_figures

REPO = Path(__file__).resolve().parents[1]
LAB_RUN = REPO / "docs" / "figures" / "lab" / "landscape-run"  # a real lab search's trials.csv and result.yaml


def drawn(fig: Any) -> Any:
    """The figure drawn (on an Agg canvas again when it was closed after saving) and its renderer."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def marker_boxes(ax: Any) -> list[Any]:
    """Display boxes of every scatter marker and line marker on `ax` (size `s` in points², `ms` in points)."""
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    px = ax.figure.dpi / 72
    boxes = []
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and len(coll.get_offsets()):
            sizes = coll.get_sizes()
            for k, (x, y) in enumerate(coll.get_offset_transform().transform(coll.get_offsets())):
                half = math.sqrt(sizes[k % len(sizes)]) / 2 * px
                boxes.append(Bbox([[x - half, y - half], [x + half, y + half]]))
    for line in ax.lines:
        if line.get_marker() in (None, "None", "", " ") or not len(line.get_xydata()):
            continue
        half = line.get_markersize() / 2 * px
        for x, y in ax.transData.transform(line.get_xydata()):
            boxes.append(Bbox([[x - half, y - half], [x + half, y + half]]))
    return boxes


def texts(fig: Any, renderer: Any) -> list[tuple[str, Any]]:
    """(text, display box) of every visible, non-empty text outside legends: titles, axis and tick
    labels, annotations (their text alone, not their leader line)."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    inside = {id(t) for leg in fig.findobj(Legend) for t in leg.get_texts()}
    if fig.legends or any(ax.get_legend() for ax in fig.axes):
        inside |= {id(leg.get_title()) for leg in fig.findobj(Legend)}
    out = []
    for t in fig.findobj(Text):
        if id(t) in inside or not t.get_visible() or not t.get_text().strip():
            continue
        if hasattr(t, "update_positions"):
            t.update_positions(renderer)
        out.append((t.get_text(), Text.get_window_extent(t, renderer)))
    return out


def legend_boxes(fig: Any, renderer: Any) -> list[Any]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [leg.get_window_extent(renderer) for leg in legends]


def assert_legend_clear(fig: Any) -> None:
    """No legend covers a data marker of any axes, nor any text of the figure."""
    renderer = drawn(fig)
    legends = legend_boxes(fig, renderer)
    assert legends, "the figure has no legend"
    for box in legends:
        for ax in fig.axes:
            covered = [m for m in marker_boxes(ax) if box.overlaps(m)]
            assert not covered, f"the legend covers {len(covered)} marker(s)"
        hidden = [text for text, tb in texts(fig, renderer) if box.overlaps(tb)]
        assert not hidden, f"the legend covers {hidden}"


def assert_labels_apart(ax: Any, labels: list[Any], renderer: Any) -> None:
    """`labels` (Text artists) overlap neither each other nor any marker of `ax`."""
    from matplotlib.text import Text

    boxes = []
    for t in labels:
        if hasattr(t, "update_positions"):
            t.update_positions(renderer)
        boxes.append((t.get_text(), Text.get_window_extent(t, renderer)))
    for i, (a, box) in enumerate(boxes):
        assert not [b for b, other in boxes[i + 1 :] if box.overlaps(other)], f"{a} overlaps another label"
        assert not [m for m in marker_boxes(ax) if box.overlaps(m)], f"{a} overlaps a marker"


def lab_points(outlier: float | None = None) -> tuple[list, Any, dict]:
    """The lab run's complete trials as Points (one more at perplexity `outlier`), its pick, result.yaml."""
    import csv

    import yaml

    from dots.search.pick.pareto import Point

    result = yaml.safe_load((LAB_RUN / "result.yaml").read_text())
    with open(LAB_RUN / "trials.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["state"] == "COMPLETE"]
    points = [
        Point(int(r["number"]), float(r["consistency"]), float(r["perplexity"]),
              {"sft": float(r["lambda_sft"]), "rlvr": float(r["lambda_rlvr"])})
        for r in rows
    ]  # fmt: skip
    if outlier is not None:
        points.append(Point(len(points), 0.05, outlier, {"sft": 2.0, "rlvr": 2.0}))
    chosen = next(p for p in points if p.number == result["trial"])
    return points, chosen, result


def test_pareto_legend_lies_off_the_data_and_an_outlier_takes_a_log_axis():
    """pareto.png of the README's lab run, plus one trial at perplexity 400: the legend covers no
    trial and no label; the perplexity axis turns logarithmic, so the other trials still spread
    over a quarter of its width or more (on a linear axis they would share 2% of it)."""
    import matplotlib.pyplot as plt

    from dots.search.pick.pareto import front_figure, pareto_front

    points, chosen, _ = lab_points(outlier=400.0)
    fig = front_figure(points, pareto_front(points), chosen, "DoTS on lab")
    assert_legend_clear(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    xs = sorted(ax.transData.transform([(p.perplexity, p.consistency) for p in points[:-1]])[:, 0])
    frame = ax.get_window_extent()
    assert (xs[-1] - xs[0]) / frame.width > 0.25
    plt.close(fig)
    # without an outlier the axis stays linear, and the legend is still off the data
    points, chosen, _ = lab_points()
    points = [p for p in points if p.perplexity < 3 * min(q.perplexity for q in points)]
    fig = front_figure(points, pareto_front(points), chosen)
    assert fig.axes[0].get_xscale() == "linear"
    assert_legend_clear(fig)
    plt.close(fig)


def test_landscape_legend_off_the_data_and_candidate_labels_apart():
    """landscape.png of the README's lab run: the legend covers no trial; the three confirmed
    candidates — within 0.1 of each other in λ, where the good merges are — each get one "#n"
    label, and no label touches another label or any marker (star, squares, rings, trials)."""
    import matplotlib.pyplot as plt

    from dots.search.pick.landscape import landscape_figure, landscape_from_run

    land = landscape_from_run(LAB_RUN)
    fig = landscape_figure(land, "DoTS on lab")
    assert_legend_clear(fig)
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("#")]
    assert sorted(t.get_text() for t in labels) == sorted(f"#{r['trial']}" for r in land.confirmed)
    assert_labels_apart(ax, labels, drawn(fig))
    assert "consistency C" in fig._suptitle.get_text()
    plt.close(fig)


def test_landscape_labels_stay_apart_when_the_candidates_crowd():
    """Three confirmed candidates 0.02 apart (closer than a label is wide): the labels still find
    free places, each inside the axes."""
    import matplotlib.pyplot as plt

    from dots.search.pick.landscape import Landscape, landscape_figure

    grid = [[0.5 + 0.1 * i, 0.5 + 0.13 * j] for i in range(6) for j in range(6)]
    lams = grid + [[1.0, 1.0], [1.02, 1.0], [1.0, 1.02]]
    numbers = list(range(len(lams)))
    c = [0.9 - 0.01 * i for i in range(len(lams))]
    confirmed = [{"trial": n, "consistency": 0.95, "interval": [0.93, 0.97], "coefficients": {}} for n in numbers[-3:]]
    land = Landscape(["sft", "rlvr"], lams, c, numbers, {numbers[-1]}, numbers[-1], (0.5, 2.0), confirmed)
    fig = landscape_figure(land)
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("#")]
    assert len(labels) == 3
    renderer = drawn(fig)
    assert_labels_apart(ax, labels, renderer)
    frame = ax.get_window_extent(renderer)
    assert all(frame.contains(*t.get_window_extent(renderer).get_points().mean(axis=0)) for t in labels)
    plt.close(fig)


def scores_report(models: list[str], benchmarks: dict[str, dict]) -> dict:
    scores = {
        m: {b: {"score": 0.3 + 0.2 * i + 0.05 * j, "stderr": 0.012 + 0.004 * j} for j, b in enumerate(benchmarks)}
        for i, m in enumerate(models)
    }
    average = {m: sum(v["score"] for v in row.values()) / len(row) for m, row in scores.items()}
    return {"benchmarks": benchmarks, "models": dict.fromkeys(models, ""), "scores": scores, "average": average}


@pytest.mark.parametrize("n_models", [3, 8])
def test_scores_picture_says_what_it_measures_with_error_bars_and_no_overlaps(tmp_path, monkeypatch, n_models):
    """scores.png: titled with each benchmark's metric, decoding and size; one error bar per bar
    (± one standard error, the average's from its benchmarks'); the values apart from each other;
    the legend off the bars and the labels."""
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    from dots.evaluate.report import plot_scores

    figures = capture_figures(monkeypatch)
    benchmarks = {
        "lab_add": {"metric": "avg@4", "temperature": 0.6, "problems": 1024},
        "lab_greedy": {"metric": "pass@1", "temperature": 0.0, "problems": 1024},
    }
    models = ["base", "sft", "rlvr", "dots", "ties", "dare", "ram", "sar"][:n_models]
    report = scores_report(models, benchmarks)
    plot_scores(report, tmp_path / "scores.png", "lab")
    fig = figures["scores.png"]
    ax = fig.axes[0]
    title = ax.get_title().replace("\n", " ")
    assert "lab_add avg@4, T = 0.6, 1024 problems" in title and "lab_greedy pass@1, greedy, 1024 problems" in title
    bars = [c for c in ax.containers if isinstance(c, BarContainer) and c.errorbar is not None]
    assert len(bars) == n_models
    errors = bars[1].errorbar.lines[2][0].get_segments()  # sft's: lab_add, lab_greedy, average
    half = [(seg[1][1] - seg[0][1]) / 2 for seg in errors]
    se = [report["scores"]["sft"][b]["stderr"] for b in benchmarks]
    assert half == pytest.approx([100 * se[0], 100 * se[1], 100 * math.sqrt(se[0] ** 2 + se[1] ** 2) / 2])
    assert_legend_clear(fig)
    values = list(ax.texts)
    assert len(values) == 3 * n_models
    renderer = drawn(fig)
    boxes = [t.get_window_extent(renderer) for t in values]
    assert not [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]
    plt.close(fig)
