"""A search's options, checked before anything is read or written.

Counts, ranges and choices of conf/search.yaml, the groups a backbone needs (a base, at
least one source, a pool for `backbone=custom`) and the engine's options: each bad value
is one line naming the option. The checkpoints and the pool are checked next, by
`search.pipeline.prepare`, still before the first byte is written.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from dots.checks import check_choice, number_in, positive_int, whole_number
from dots.errors import DotsError
from dots.options.compose import check_backbone_sources
from dots.plain import to_plain
from dots.scoring.grade import CONSISTENCY_RULES
from dots.scoring.perplexity import PERPLEXITY_MEANS
from dots.search.study.adaptive import AdaptiveConfig
from dots.search.study.granularity import DEFAULT_GRANULARITY, check_granularity
from dots.search.study.samplers import build_sampler
from dots.search.study.stopping import stop_rule
from dots.search.study.tracking import check_tracking_options

ANSWER_MODES = ("math", "choice")
INF = math.inf


def check_sampling(section: Any, where: str) -> None:
    """temperature >= 0, top_p in (0, 1], max_tokens >= 1 of a sampling section."""
    number_in(section.temperature, f"{where}.temperature", 0.0, INF)
    number_in(section.top_p, f"{where}.top_p", 0.0, 1.0, low_open=True)
    positive_int(section.max_tokens, f"{where}.max_tokens")


def check_study_options(search: Any) -> None:
    from dots.search.identity import check_range

    positive_int(search.n_trials, "search.n_trials")
    positive_int(search.k, "search.k")
    positive_int(search.n_startup_trials, "search.n_startup_trials", minimum=0)
    check_sampling(search, "search")
    check_choice(search.answer_mode, ANSWER_MODES, "search.answer_mode")
    check_choice(search.get("consistency", "majority"), CONSISTENCY_RULES, "search.consistency")
    check_choice(search.get("perplexity", "tokens"), PERPLEXITY_MEANS, "search.perplexity")
    check_granularity(search.get("granularity", DEFAULT_GRANULARITY))
    workers = positive_int(search.workers, "search.workers")
    worker = positive_int(search.worker, "search.worker", minimum=0)
    if worker >= workers:
        raise DotsError(f"search.worker must be below search.workers ({workers}), got {worker}")
    number_in(search.heartbeat_s, "search.heartbeat_s", 0.0, INF, low_open=True)
    number_in(search.grace_s, "search.grace_s", 0.0, INF, low_open=True)
    if not isinstance(search.range, (ListConfig, list)):
        raise DotsError(f"search.range must be [low, high], got {search.range!r}")
    check_range(list(search.range))
    fixed = search.get("fixed")
    if fixed is not None and not isinstance(fixed, (ListConfig, list)):
        raise DotsError(f"search.fixed must be a list of points, e.g. [[1,1],[0.5,0.5]], got {fixed!r}")
    AdaptiveConfig(**to_plain(search.get("adaptive") or {}))
    if search.get("batch") is not None:
        positive_int(search.batch, "search.batch")
    if not isinstance(search.get("prune", False), bool):
        raise DotsError(f"search.prune must be true or false, got {search.prune!r}")
    stop_rule(search)


def check_selection_options(selection: Any) -> None:
    from dots.search.selection import SelectionConfig

    for key in ("n", "m", "batch"):
        positive_int(selection[key], f"selection.{key}")
    check_sampling(selection, "selection")
    if selection.threshold is not None:
        number_in(selection.threshold, "selection.threshold", 0.0, 1.0)
    number_in(selection.easy_fraction, "selection.easy_fraction", 0.0, 1.0)
    SelectionConfig(**to_plain(selection))  # the choices (strategy, source)


def check_backbone(cfg: DictConfig) -> None:
    """A base, at least one source (each with a path), a known prompt, and a pool."""
    from dots.scoring.prompts import TEMPLATES

    backbone = cfg.backbone
    name = backbone.get("name", "?")
    if OmegaConf.is_missing(backbone, "base") or not backbone.get("base"):
        raise DotsError(f"backbone {name} has no base model: add backbone.base=DIR_OR_HUB_ID")
    sources = backbone.get("sources")
    if not sources:
        raise DotsError(
            f"backbone {name} has no source model: add +backbone.sources.NAME=DIR_OR_HUB_ID (one per source)"
        )
    check_backbone_sources(cfg)  # a `???` source: the backbone's note on where its id is
    for key in sources:
        if not sources[key]:
            raise DotsError(f"backbone {name} has no path for source {key}: add backbone.sources.{key}=DIR_OR_HUB_ID")
    check_choice(backbone.prompt, TEMPLATES, "backbone.prompt")
    positive_int(backbone.max_tokens, "backbone.max_tokens")
    if cfg.get("pool") is None:
        raise DotsError(
            f"backbone {name} names no pool of queries: "
            "add pool=jsonl pool.path=FILE (or pool=parquet, hub, math_valid)"
        )


def check_search_config(cfg: DictConfig) -> str:
    """Every option of a search, or a one-line DotsError; returns the engine's name (auto resolved)."""
    from dots.engines.factory import resolve_engine
    from dots.search.pick.pareto import PICKS
    from dots.vectors.sparsify import SparsifyConfig

    whole_number(cfg.seed, "seed")
    check_backbone(cfg)
    check_study_options(cfg.search)
    build_sampler(to_plain(cfg.sampler), int(cfg.seed))  # its name and options
    SparsifyConfig(**to_plain(cfg.sparsify))
    check_selection_options(cfg.selection)
    check_choice(cfg.pick, PICKS, "pick")
    check_tracking_options(cfg.get("tracking"))
    return resolve_engine(cfg.engine).name
