"""Pick rules on hand-made fronts."""

import pytest

from dots.errors import DotsError
from dots.search.pareto import Point, pareto_front, pick, plot_front


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


def test_plot_is_written(tmp_path):
    points = pts((0.5, 10.0), (0.6, 9.0), (0.7, 12.0))
    front = pareto_front(points)
    plot_front(points, front, pick(front), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_plot_never_goes_below_zero_and_marks_coincident_points():
    """All consistencies 0 (a lab run early on): no negative y axis; three trials on one spot
    are labelled ×3 instead of hiding behind each other."""
    import matplotlib.pyplot as plt

    from dots.search.pareto import front_figure

    points = [Point(0, 0.0, 5.0, {}), Point(1, 0.0, 5.0, {}), Point(2, 0.0, 5.0, {}), Point(3, 0.0, 7.0, {})]
    fig = front_figure(points, pareto_front(points), points[0])
    ax = fig.axes[0]
    assert ax.get_ylim()[0] >= 0.0 and ax.get_ylim()[1] > 0.0
    assert [t.get_text() for t in ax.texts] == ["×3"]
    plt.close(fig)


def test_model_card_tags_dots_once():
    import yaml

    from dots.merge.card import render_model_card

    for method in ("dots", "ties"):
        card = render_model_card(method=method, options={}, base="b", sources={"sft": "s"})
        tags = yaml.safe_load(card.split("---")[1])["tags"]
        assert tags.count("dots") == 1 and method in tags
