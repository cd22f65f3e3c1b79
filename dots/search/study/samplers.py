"""The study's sampler, chosen by the `sampler` config group (dots/conf/sampler/): one short
builder per sampler behind a registry, each seeded by the caller.

How each behaves with N workers on one study (`search.workers`):
- `tpe` (the paper's, default): the constant liar — running trials count as bad results;
- `gp`: running trials are pending points of a q-batch logEHVI acquisition;
- `nsga2`: each worker breeds from the last complete generation;
- `random`: workers are independent.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from dots.errors import DotsError
from dots.registry import Registry

# a sampler's builder: (its options, the seed, the number of workers) → the Optuna sampler
SAMPLERS: Registry[Callable[[Mapping[str, Any], int, int], Any]] = Registry("sampler")


@SAMPLERS.register("tpe")
def _tpe(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import TPESampler

    return TPESampler(
        seed=seed,
        n_startup_trials=int(opts["n_startup_trials"]),
        multivariate=bool(opts.get("multivariate", False)),
        constant_liar=workers > 1,
    )


@SAMPLERS.register("gp")
def _gp(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(
        seed=seed,
        n_startup_trials=int(opts["n_startup_trials"]),
        deterministic_objective=bool(opts.get("deterministic_objective", False)),
    )


@SAMPLERS.register("nsga2")
def _nsga2(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import NSGAIISampler

    population = int(opts.get("population_size", 10))
    if population < 2:
        raise DotsError(f"sampler.population_size must be >= 2, got {population}")
    mutation = opts.get("mutation_prob")
    return NSGAIISampler(
        seed=seed,
        population_size=population,
        crossover_prob=float(opts.get("crossover_prob", 0.9)),
        swapping_prob=float(opts.get("swapping_prob", 0.5)),
        mutation_prob=None if mutation is None else float(mutation),
    )


@SAMPLERS.register("random")
def _random(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


def build_sampler(opts: Mapping[str, Any], seed: int, workers: int = 1) -> Any:
    """The Optuna sampler `opts["name"]` names, with its options, seeded with `seed`."""
    return SAMPLERS.lookup(opts.get("name", "tpe"))(opts, seed, workers)
