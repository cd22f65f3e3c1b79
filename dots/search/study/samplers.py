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

from dots.options.study import SamplerOptions, sampler_options
from dots.registry import Registry

__all__ = ["SAMPLERS", "build_sampler"]

# a sampler's builder: (its options, the seed, the number of workers) → the Optuna sampler
SAMPLERS: Registry[Callable[[Mapping[str, Any], int, int], Any]] = Registry("sampler")


@SAMPLERS.register("tpe")
def _tpe(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import TPESampler

    return TPESampler(
        seed=seed,
        n_startup_trials=int(opts["n_startup_trials"]),
        multivariate=bool(opts["multivariate"]),
        constant_liar=workers > 1,
    )


@SAMPLERS.register("gp")
def _gp(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(
        seed=seed,
        n_startup_trials=int(opts["n_startup_trials"]),
        deterministic_objective=bool(opts["deterministic_objective"]),
    )


@SAMPLERS.register("nsga2")
def _nsga2(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import NSGAIISampler

    mutation = opts["mutation_prob"]
    return NSGAIISampler(
        seed=seed,
        population_size=int(opts["population_size"]),
        crossover_prob=float(opts["crossover_prob"]),
        swapping_prob=float(opts["swapping_prob"]),
        mutation_prob=None if mutation is None else float(mutation),
    )


@SAMPLERS.register("random")
def _random(opts: Mapping[str, Any], seed: int, workers: int) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


def build_sampler(options: SamplerOptions | Mapping[str, Any], seed: int, workers: int = 1) -> Any:
    """The Optuna sampler `options.name` names, with its options (conf/sampler/<name>.yaml, all
    of them), seeded with `seed`; a mapping is checked into SamplerOptions first."""
    if not isinstance(options, SamplerOptions):
        options = sampler_options(options)
    return SAMPLERS.lookup(options.name)(options.settings, seed, workers)
