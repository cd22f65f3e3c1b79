"""The smoothed C and the landscape on numbers worked out apart from the code (#49): a hump of
nine trials whose leave-one-out errors put the bandwidth in the middle of the candidates, the
surrogate and its standard error at a point between trials, the smoothed rule's order and its
interval, and the landscape drawing that surrogate over the search range read from the run —
where the tiny checkpoints' C of 0 everywhere could not tell a wrong range or bandwidth apart.

The expected values use the matrix form of docs/method.md §5 (numpy, all trials at once),
not the module's per-trial loops:  Ĉ = (W C + κ C̄) / (W 1 + κ),  se = σ̂ ‖w‖ / (w·1 + κ)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import yaml

from dots.search.pick.landscape import Landscape, landscape_figure, landscape_from_run
from dots.search.pick.pareto import Point
from dots.search.pick.rules import PickContext, rank, uncertainty
from dots.search.pick.smoothing import BANDWIDTHS, fit_smoother

LOW, HIGH = 0.5, 2.5  # the search range: λ = LOW + x (HIGH − LOW)
X = np.linspace(0.0, 1.0, 9)  # the trials' scaled positions
C = np.array([0.30, 0.42, 0.55, 0.63, 0.70, 0.66, 0.58, 0.47, 0.35])  # a hump, highest at x = 0.5
LAMS = [[LOW + x * (HIGH - LOW)] for x in X]


def loo_errors() -> dict[float, float]:
    """Each bandwidth's mean squared leave-one-out residual (the diagonal of W zeroed)."""
    out = {}
    for h in BANDWIDTHS:
        w = np.exp(-((X[:, None] - X[None, :]) ** 2) / (2 * h * h))
        np.fill_diagonal(w, 0.0)
        out[h] = float(np.mean((C - (w @ C + C.mean()) / (w.sum(axis=1) + 1.0)) ** 2))
    return out


def surrogate_at(x: float, h: float, sigma: float) -> tuple[float, float]:
    w = np.exp(-((X - x) ** 2) / (2 * h * h))
    total = w.sum() + 1.0
    return float((w @ C + C.mean()) / total), float(sigma * np.sqrt((w * w).sum()) / total)


def test_the_bandwidth_is_the_one_with_the_least_leave_one_out_error():
    errors = loo_errors()
    best = min(errors, key=errors.__getitem__)
    assert best == 0.13  # neither end of BANDWIDTHS: a rule that took the first or last fails
    fitted = fit_smoother(LAMS, C.tolist(), LOW, HIGH)
    assert fitted.bandwidth == best
    assert fitted.sigma == pytest.approx(np.sqrt(errors[best]), rel=1e-12)
    assert fitted.prior == pytest.approx(C.mean(), rel=1e-12)


@pytest.mark.parametrize("x", [0.0, 0.3, 0.5, 0.8125])
def test_the_surrogate_and_its_standard_error_between_trials(x):
    fitted = fit_smoother(LAMS, C.tolist(), LOW, HIGH)
    value, se = fitted.at([LOW + x * (HIGH - LOW)])  # unscaled λ: the range's scaling is applied
    expected_value, expected_se = surrogate_at(x, 0.13, np.sqrt(loo_errors()[0.13]))
    assert value == pytest.approx(expected_value, rel=1e-12)
    assert se == pytest.approx(expected_se, rel=1e-12)


def points() -> list[Point]:
    """The nine trials, plus a lucky one: C 0.75 near the edge (x = 0.96875), where its
    neighbours score 0.35–0.47. PPL all equal."""
    trials = [Point(n, float(c), 6.0, {"sft": lam[0]}) for n, (c, lam) in enumerate(zip(C, LAMS))]
    return [*trials, Point(9, 0.75, 6.0, {"sft": LOW + 0.96875 * (HIGH - LOW)})]


def test_the_smoothed_rule_orders_by_the_surrogate_not_by_the_trials_own_c():
    context = PickContext(bounds=(LOW, HIGH))
    ranked = rank("smoothed", points(), context)
    assert rank("max_consistency", points())[0].number == 9  # the lucky trial has the best C
    x = np.array([*X, 0.96875])
    c = np.array([*C, 0.75])
    errors = {}
    for h in BANDWIDTHS:  # refit with the lucky trial among them
        w = np.exp(-((x[:, None] - x[None, :]) ** 2) / (2 * h * h))
        np.fill_diagonal(w, 0.0)
        errors[h] = float(np.mean((c - (w @ c + c.mean()) / (w.sum(axis=1) + 1.0)) ** 2))
    h = min(errors, key=lambda b: (errors[b], b))
    w = np.exp(-((x[:, None] - x[None, :]) ** 2) / (2 * h * h))
    smoothed = (w @ c + c.mean()) / (w.sum(axis=1) + 1.0)
    assert [p.number for p in ranked] == [int(k) for k in np.argsort(-smoothed, kind="stable")]
    assert ranked[0].number == 4  # the top of the hump, not the lucky trial
    sure = uncertainty(ranked[0], "smoothed", points(), context)["smoothed"]
    se = np.sqrt(errors[h]) * np.sqrt((w[4] ** 2).sum()) / (w[4].sum() + 1.0)
    assert sure["consistency"] == pytest.approx(smoothed[4], rel=1e-12) and sure["bandwidth"] == h
    assert sure["interval"] == pytest.approx([smoothed[4] - 1.96 * se, smoothed[4] + 1.96 * se], rel=1e-12)


WIDE = (0.25, 3.0)  # a search range wider than the trials reach


def landscape(names: list[str], lams: list[list[float]], bounds: tuple[float, float]) -> Landscape:
    n = len(lams)
    return Landscape(names, lams, C[:n].tolist(), list(range(n)), {4}, 4, bounds)


def test_the_one_source_curve_is_the_surrogate_over_the_whole_range():
    """The curve runs over the search range, wider here than the trials' extent."""
    from helpers import line_data

    figure = landscape_figure(landscape(["sft"], LAMS, WIDE))
    xs, ys = line_data(figure.axes[0])["smoothed C"]
    assert (xs[0], xs[-1], len(xs)) == (*WIDE, 120)
    fitted = fit_smoother(LAMS, C.tolist(), *WIDE)
    for k in (0, 37, 60, 119):
        assert ys[k] == pytest.approx(fitted.at([xs[k]])[0], rel=1e-12)


def test_the_two_source_map_shades_the_surrogate_over_the_search_range():
    """The shading spans the range on both axes (not the trials' own extent) and its values run
    between the surrogate's least and greatest on the 48 × 48 grid."""
    from matplotlib.contour import ContourSet

    lams = [[LOW + x * (HIGH - LOW), LOW + (1 - x) * 0.5 * (HIGH - LOW)] for x in X]
    figure = landscape_figure(landscape(["sft", "rlvr"], lams, WIDE))
    ax = figure.axes[0]
    (shading,) = [c for c in ax.collections if isinstance(c, ContourSet)]
    corners = np.concatenate([p.vertices for p in shading.get_paths() if len(p.vertices)])
    low, high = WIDE
    assert corners.min(axis=0) == pytest.approx([low, low]) and corners.max(axis=0) == pytest.approx([high, high])
    fitted = fit_smoother(lams, C.tolist(), low, high)
    grid = np.linspace(low, high, 48)
    z = [fitted.at([a, b])[0] for a in grid for b in grid]
    assert shading.zmin == pytest.approx(min(z), rel=1e-12) and shading.zmax == pytest.approx(max(z), rel=1e-12)
    pad = 0.03 * (high - low)
    assert ax.get_xlim() == pytest.approx((low - pad, high + pad))
    assert ax.get_ylim() == pytest.approx((low - pad, high + pad))


@pytest.mark.parametrize("stated", [[0.25, 3.0], None])
def test_a_redraw_takes_the_runs_range_or_else_the_trials_extent(tmp_path, stated):
    """landscape_from_run: the range result.yaml states (the search's bounds), else the least and
    greatest λ of the trials; a failed trial is left out."""
    with open(tmp_path / "trials.csv", "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["number", "state", "consistency", "perplexity", "lambda_sft", "lambda_rlvr"])
        for n, (c, lam) in enumerate(zip(C, LAMS)):
            out.writerow([n, "COMPLETE", c, 6.0 + n, lam[0], 1.0 + 0.1 * n])
        out.writerow([9, "FAIL", "", "", 9.0, 9.0])
    result = {"trial": 4, "uncertainty": {"consistency": 0.7, "from": "search"}}
    (tmp_path / "result.yaml").write_text(yaml.safe_dump({**result, **({"range": stated} if stated else {})}))
    land = landscape_from_run(tmp_path)
    assert land.bounds == (tuple(stated) if stated else (0.5, 2.5))
    assert land.numbers == list(range(9)) and land.names == ["sft", "rlvr"] and land.pick == 4
    assert land.front == {0, 1, 2, 3, 4}  # C rises with PPL up to the top of the hump
