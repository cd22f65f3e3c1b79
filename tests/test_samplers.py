"""The `sampler` config group: every sampler builds from its config file, is seeded and stays
in the range on a real two-objective study, and runs a search."""

from __future__ import annotations

import pytest

from dots.errors import DotsError
from dots.options.compose import compose
from dots.paths import CONF_DIR
from dots.plain import to_plain
from dots.search.study.samplers import SAMPLERS, build_sampler

NAMES = sorted(p.stem for p in (CONF_DIR / "sampler").glob("*.yaml"))


def proposals(name: str, seed: int, n: int = 14) -> list[tuple[float, float]]:
    """λ proposed over `n` trials of a real two-objective study (a smooth toy front)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opts = to_plain(compose("search", [f"sampler={name}", "search.n_startup_trials=4"]).sampler)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=build_sampler(opts, seed))
    points = []
    for _ in range(n):
        trial = study.ask()
        a, b = trial.suggest_float("lambda_sft", 0.0, 2.0), trial.suggest_float("lambda_rlvr", 0.0, 2.0)
        study.tell(trial, [-((a - 0.7) ** 2) - (b - 1.3) ** 2, (a - 1.5) ** 2 + b])
        points.append((a, b))
    return points


def test_every_config_file_names_a_registered_sampler():
    assert NAMES == sorted(SAMPLERS) == ["gp", "nsga2", "random", "tpe"]
    assert compose("search", []).sampler.name == "tpe"  # the paper's is the default


@pytest.mark.parametrize("name", NAMES)
def test_sampler_is_seeded_and_in_range(name):
    """(NSGA-II's crossover can copy a parent: the study loop, not the sampler, keeps a
    search from scoring one point twice.)"""
    first = proposals(name, seed=3)
    assert first == proposals(name, seed=3)
    assert first != proposals(name, seed=4)
    assert all(0.0 <= x <= 2.0 for p in first for x in p)
    assert len(set(first)) > len(first) // 2


def test_unknown_sampler_and_bad_population_are_one_line_errors():
    with pytest.raises(DotsError, match="unknown sampler 'cmaes'"):
        build_sampler({"name": "cmaes"}, 0)
    with pytest.raises(DotsError, match="population_size must be >= 2"):
        build_sampler({"name": "nsga2", "population_size": 1}, 0)


def test_the_sampler_is_part_of_the_run_identity():
    from dots.search.identity import NOT_IDENTITY

    assert "sampler" not in NOT_IDENTITY
    a, b = (compose("search", [f"sampler={n}"]) for n in ("tpe", "gp"))
    assert to_plain(a.sampler) != to_plain(b.sampler)
