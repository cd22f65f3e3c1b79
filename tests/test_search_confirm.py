"""The confirmation stage and the pick's report end to end (transformers engine, tiny checkpoints):
confirm.json, the pick on fresh estimates with its interval, resume, landscape.png from trials.csv,
the card, the options."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import overrides, run

from dots.errors import DotsError
from dots.options.compose import compose
from dots.options.search import search_options


def confirmed_run(tiny, run_dir, *extra):
    return run(overrides(tiny, run_dir, trials=5, extra=["confirm.enabled=true", "confirm.k=3", *extra]))


def test_the_pick_is_the_highest_confirmed_consistency_with_its_interval(tiny, tmp_path):
    run_dir = confirmed_run(tiny, tmp_path / "run", "confirm.top=3")
    confirm = json.loads((run_dir / "confirm.json").read_text())
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    rows = confirm["points"]
    assert len(rows) == 3 and [r["rank"] for r in rows] == [0, 1, 2]
    # the candidates are the rule's top three trials, best search C first
    searched = [r["search"]["consistency"] for r in rows]
    assert searched == sorted(searched, reverse=True)
    best = max(rows, key=lambda r: (r["consistency"], -r["rank"]))
    assert result["trial"] == confirm["pick"] == best["trial"]
    sure = result["uncertainty"]
    assert sure["from"] == "confirmation" and sure["consistency"] == best["consistency"]
    lo, hi = sure["interval"]
    assert lo <= best["consistency"] <= hi and sure["queries"] == confirm["n_queries"] == 3
    assert sure["search"]["from"] == "search"  # the trial's own estimate is kept beside it
    assert confirm["tokens"] == sum(r["tokens"] for r in rows) > 0
    trials = [r for r in (run_dir / "trials.csv").read_text().splitlines()[1:]]
    assert confirm["study_tokens"] > 0 and confirm["share"] == confirm["tokens"] / confirm["study_tokens"]
    assert len(trials) == 5
    card = (run_dir / "model" / "README.md").read_text()
    assert "re-scored with fresh samples" in card and "landscape.png" in card
    assert (run_dir / "model" / "landscape.png").is_file()


def test_a_rerun_loads_the_confirmation_and_other_options_confirm_again(tiny, tmp_path):
    run_dir = confirmed_run(tiny, tmp_path / "run")
    stamp = (run_dir / "confirm.json").stat().st_mtime_ns
    partial = (run_dir / "confirm.partial.jsonl").read_text()
    confirmed_run(tiny, tmp_path / "run")
    assert (run_dir / "confirm.json").stat().st_mtime_ns == stamp  # done: loaded, not scored again
    assert (run_dir / "confirm.partial.jsonl").read_text() == partial
    confirmed_run(tiny, tmp_path / "run", "confirm.queries=held_out")
    confirm = json.loads((run_dir / "confirm.json").read_text())
    assert confirm["queries"] == "held_out" and confirm["n_queries"] == 3
    assert len((run_dir / "confirm.partial.jsonl").read_text().splitlines()) > len(partial.splitlines())


def test_no_confirmation_when_off_or_for_the_knee(tiny, tmp_path):
    plain = run(overrides(tiny, tmp_path / "off", trials=3, extra=["confirm.enabled=false"]))
    assert not (plain / "confirm.json").exists()
    result = yaml.safe_load((plain / "result.yaml").read_text())
    assert result["uncertainty"]["from"] == "search" and "confirmation" not in result
    knee = confirmed_run(tiny, tmp_path / "knee", "pick=knee")
    assert not (knee / "confirm.json").exists()


def test_the_landscape_is_drawn_from_trials_csv(tiny, tmp_path):
    """landscape.png's numbers come back from trials.csv and result.yaml alone."""
    from dots.search.pick.landscape import landscape_figure, landscape_from_run

    run_dir = confirmed_run(tiny, tmp_path / "run", "pick=smoothed")
    assert (run_dir / "landscape.png").stat().st_size > 10_000
    land = landscape_from_run(run_dir)
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    front = {p["trial"] for p in result["front"]}
    assert land.names == ["sft", "rlvr"] and land.front == front and land.pick == result["trial"]
    assert [r["trial"] for r in land.confirmed] == [r["trial"] for r in result["confirmation"]["points"]]
    by_number = dict(zip(land.numbers, land.lams))
    assert by_number[result["trial"]] == pytest.approx([result["coefficients"]["sft"], result["coefficients"]["rlvr"]])
    smoothed = result["uncertainty"]["search"]["smoothed"]["consistency"]
    assert land.smoother().at(by_number[result["trial"]])[0] == pytest.approx(smoothed)
    figure = landscape_figure(land)
    assert figure.axes[0].get_xlabel() == "λ sft" and figure.axes[0].get_ylabel() == "λ rlvr"


@pytest.mark.parametrize("sources", [("sft",), ("sft", "rlvr", "third")])
def test_the_landscape_for_one_and_three_sources(tiny, tmp_path, sources):
    run_dir = run(overrides(tiny, tmp_path / "run", sources=sources, trials=3))
    from dots.search.pick.landscape import landscape_figure, landscape_from_run

    figure = landscape_figure(landscape_from_run(run_dir))
    labels = [ax.get_xlabel() for ax in figure.axes if ax.get_xlabel()]
    assert labels == (["λ sft"] if len(sources) == 1 else ["λ sft", "λ sft", "λ rlvr"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["confirm.top=0"], "confirm.top must be >= 1"),
        (["confirm.k=x"], "confirm.k must be an integer"),
        (["confirm.queries=test"], "confirm.queries must be one of selection, held_out"),
        (["confirm.enabled=1"], "confirm.enabled must be true or false"),
        (["+confirm.size=3"], "unknown option confirm.size"),
        (["pick=agreement", "selection.strategy=random"], "pick=agreement compares with the sources"),
    ],
)
def test_bad_confirmation_options_are_one_line_errors(tmp_path, extra, message):
    with pytest.raises(DotsError, match=message):
        search_options(compose("search", [f"run_dir={tmp_path / 'run'}", *extra]))
    assert not (tmp_path / "run").exists()


def test_the_confirmation_is_on_by_default_with_as_many_samples_as_a_trial():
    default = search_options(compose("search", []))
    assert default.confirm.enabled and default.pick == "smoothed" and default.confirm.k == default.search.k
    assert search_options(compose("search", ["search.k=3"])).confirm.k == 3
    assert search_options(compose("search", ["search.k=3", "confirm.k=5"])).confirm.k == 5


def test_the_official_preset_does_not_confirm():
    assert search_options(compose("search", ["preset=official", "confirm.enabled=true"])).confirm.enabled
    assert not search_options(compose("search", ["preset=official"])).confirm.enabled


def test_the_readme_landscape_is_redrawn_from_its_runs_trials_csv():
    """The README's picture comes from docs/figures/lab/landscape-run (trials.csv, result.yaml)."""
    from helpers import REPO

    from dots.search.pick.landscape import landscape_figure, landscape_from_run

    run_dir = REPO / "docs" / "figures" / "lab" / "landscape-run"
    land = landscape_from_run(run_dir)
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert len(land.numbers) == result["complete_trials"] and land.pick == result["trial"]
    assert land.c[land.numbers.index(land.pick)] == pytest.approx(result["objectives"]["consistency"])
    # the default pick: smoothed, its top 3 confirmed; the pick is the candidate with the best fresh C
    assert result["pick"] == "smoothed" and [r["rank"] for r in land.confirmed] == [0, 1, 2]
    assert max(land.confirmed, key=lambda r: r["consistency"])["trial"] == land.pick
    lo, hi = result["uncertainty"]["interval"]
    assert f"[{lo:.3f}, {hi:.3f}]" in land.pick_label()
    assert f"interval {lo:.3f}–{hi:.3f}" in (REPO / "README.md").read_text()  # what the README says of it
    assert landscape_figure(land).axes[0].get_xlabel() == "λ sft"
