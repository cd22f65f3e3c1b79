"""Pick rules on hand-made fronts, and the Pareto plot: what it draws."""

import pytest
from helpers import capture_figures, legend_texts, line_data

from dots.errors import DotsError
from dots.search.pick.pareto import Point, pareto_front, pick, plot_front


def pts(*rows):
    return [Point(i, c, p, {"sft": i / 10, "rlvr": 1.0}) for i, (c, p) in enumerate(rows)]


def test_front_drops_dominated_points():
    points = pts((0.5, 10.0), (0.6, 9.0), (0.7, 12.0), (0.4, 20.0), (0.7, 12.0))
    front = pareto_front(points)
    assert [p.number for p in front] == [2, 4, 1]  # (0.5,10) is dominated by (0.6,9); (0.4,20) too


def test_max_consistency_ties_go_to_lower_perplexity():
    front = pareto_front(pts((0.9, 5.0), (0.9, 4.0), (0.5, 1.0)))
    assert pick(front, "max_consistency").number == 1


def test_knee_is_nearest_to_the_ideal_after_normalisation():
    # extremes (1.0, 100) and (0.0, 1); the middle point is near the ideal corner
    front = pareto_front(pts((1.0, 100.0), (0.9, 2.0), (0.0, 1.0)))
    assert pick(front, "knee").number == 1
    assert pick(front, "max_consistency").number == 0
    # normalisation matters: raw PPL scale would favour the low-ppl end
    front = pareto_front(pts((1.0, 1000.0), (0.2, 10.0), (0.95, 600.0)))
    assert pick(front, "knee").number == 2


def test_unknown_rule_and_empty_front():
    with pytest.raises(DotsError, match="unknown pick rule"):
        pick(pts((1, 1)), "best")
    with pytest.raises(DotsError, match="no complete trial"):
        pick([], "knee")


def test_plot_draws_every_trial_the_front_and_the_pick(tmp_path, monkeypatch):
    """What pareto.png shows: every trial at (perplexity, consistency), the front as a line in
    order of perplexity, the pick as a star at its point with its λ in the legend."""
    figures = capture_figures(monkeypatch)
    points = pts((0.5, 10.0), (0.6, 9.0), (0.7, 12.0), (0.4, 20.0))
    front = pareto_front(points)
    chosen = pick(front, "max_consistency")
    plot_front(points, front, chosen, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = figures["p.png"].axes[0]
    trials, star = ax.collections[0], ax.collections[-1]
    assert trials.get_offsets().tolist() == [[p.perplexity, p.consistency] for p in points]
    assert line_data(ax)["Pareto front"] == ([9.0, 12.0], [0.6, 0.7])  # (0.5, 10) and (0.4, 20) are dominated
    assert star.get_offsets().tolist() == [[12.0, 0.7]] and chosen.number == 2
    assert star.get_paths()[0].vertices.shape[0] == 11  # a star marker: 10 points, closed
    assert legend_texts(ax) == ["trials", "Pareto front", "pick: sft=0.20, rlvr=1.00"]
    assert ax.get_xlabel().startswith("perplexity") and ax.get_ylabel().startswith("mean answer consistency")


def test_plot_never_goes_below_zero_and_marks_coincident_points():
    """All consistencies 0 (a lab run early on): no negative y axis; three trials on one spot
    are labelled ×3 instead of hiding behind each other."""
    import matplotlib.pyplot as plt

    from dots.search.pick.pareto import front_figure

    points = [Point(0, 0.0, 5.0, {}), Point(1, 0.0, 5.0, {}), Point(2, 0.0, 5.0, {}), Point(3, 0.0, 7.0, {})]
    fig = front_figure(points, pareto_front(points), points[0])
    ax = fig.axes[0]
    assert ax.get_ylim()[0] >= 0.0 and ax.get_ylim()[1] > 0.0
    assert [t.get_text() for t in ax.texts] == ["×3"]
    plt.close(fig)


def test_model_card_tags_dots_once():
    import yaml

    from dots.export.card import render_model_card

    for method in ("dots", "ties"):
        card = render_model_card(method=method, options={}, base="b", sources={"sft": "s"})
        tags = yaml.safe_load(card.split("---")[1])["tags"]
        assert tags.count("dots") == 1 and method in tags


def test_trials_csv_has_every_key_once_in_first_seen_order(tmp_path):
    """trials.csv: one column per key any row has (first seen first), a row per trial, blank where
    a trial lacks a key."""
    import csv

    from dots.search.pick.pareto import write_trials_csv

    path = tmp_path / "trials.csv"
    write_trials_csv([{"number": 0, "c": 0.5}, {"number": 1, "ppl": 3.0, "c": 0.25}], path)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [["number", "c", "ppl"], ["0", "0.5", ""], ["1", "0.25", "3.0"]]
