"""A search's options (`python -m dots.search`, conf/search.yaml) as one typed, frozen object,
checked before anything is read or written.

`search_options` turns the composed config into `SearchOptions` once, at the command's entry:
counts, ranges and choices, the groups a backbone needs (a base, at least one source, a pool),
the sampler, tracking and engine options — each bad value one line naming the option. The
stages, the engines and the plan take these objects, never the config. `SearchOptions.config`
keeps the whole resolved config as plain data: what the run directory's config.yaml, the model
card, tracking and the run identity (`dots.search.identity`) record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from dots.checks import check_choice, check_flag, positive_int, whole_number
from dots.errors import DotsError
from dots.options.compose import check_backbone_sources
from dots.options.engine import EngineOptions, engine_options
from dots.options.pick import PICKS, ConfirmOptions
from dots.options.selection import SelectionConfig
from dots.options.study import SamplerOptions, StudyOptions, sampler_options, study_options
from dots.options.typed import from_section
from dots.plain import to_plain
from dots.registry import unknown
from dots.vectors.sparsify import SparsifyConfig

__all__ = [
    "BackboneOptions",
    "ExportOptions",
    "PlanOptions",
    "SearchOptions",
    "TRACKERS",
    "TrackingOptions",
    "config_yaml",
    "plan_options",
    "search_options",
    "tracking_options",
]

TRACKERS = ("none", "mlflow", "wandb")
WANDB_MODES = (None, "online", "offline", "disabled")


@dataclass(frozen=True)
class BackboneOptions:
    """The `backbone` group as the search reads it: base and sources (path or Hub id each), the
    prompt template, the output's config.json source."""

    name: str
    base: str
    sources: dict[str, str]
    prompt: str
    max_tokens: int
    revision: str | None = None
    config_from: str = "base"


@dataclass(frozen=True)
class ExportOptions:
    """conf/search.yaml `export:`."""

    enabled: bool = True
    dir: str | None = None
    overwrite: bool = False
    push_to_hub: str | None = None
    private: bool = True
    device: str | None = None

    def __post_init__(self) -> None:
        for name in ("enabled", "overwrite", "private"):
            if not isinstance(getattr(self, name), bool):
                raise DotsError(f"export.{name} must be true or false, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class TrackingOptions:
    """The `tracking` group: the backend's name and its options as written (docs/tracking.md)."""

    name: str = "none"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in TRACKERS:
            raise unknown("tracking backend", self.name, TRACKERS)
        mode = self.settings.get("mode")
        if self.name == "wandb" and mode not in WANDB_MODES:
            raise DotsError(f"tracking.mode must be online, offline, disabled or null ($WANDB_MODE), got {mode!r}")


def tracking_options(section: Any) -> TrackingOptions:
    """The `tracking` group (absent: none) as TrackingOptions."""
    values = dict(to_plain(section) or {})
    return TrackingOptions(str(values.pop("name", "none")), values)


@dataclass(frozen=True)
class SearchOptions:
    """Everything `python -m dots.search` reads, checked."""

    seed: int
    run_dir: str | None
    cache_dir: str | None  # the cache root (τ̃ under <root>/taskvec), as for dots.merge
    replace_run: bool  # a run_dir holding another search's results may be taken over
    backbone: BackboneOptions
    pool: Mapping[str, Any]  # the `pool` group, read by dots.io.problems.load_pool
    sparsify: SparsifyConfig
    selection: SelectionConfig
    search: StudyOptions
    sampler: SamplerOptions
    pick: str
    confirm: ConfirmOptions
    export: ExportOptions
    tracking: TrackingOptions
    engine: EngineOptions
    config: Mapping[str, Any]  # the whole resolved config, as plain data

    @property
    def plan(self) -> PlanOptions:
        """What the memory plan reads of these options."""
        backbone = self.backbone
        return PlanOptions(
            self.engine, self.search.k, self.search.max_tokens, backbone.base, backbone.revision,
            dict(backbone.sources), self.sparsify,
        )  # fmt: skip


@dataclass(frozen=True)
class PlanOptions:
    """What the memory plan of a search (`dots.plan.search.plan_search`) and the doctor read: the
    engine, search.k and search.max_tokens, the backbone's base and sources, the sparsity."""

    engine: EngineOptions
    k: int
    max_tokens: int
    base: str
    revision: str | None
    sources: dict[str, str | None]  # None: not given (a backbone whose ids the paper leaves out)
    sparsify: SparsifyConfig


def plan_options(cfg: DictConfig) -> PlanOptions:
    """The plan's options of a composed search config (`python -m dots.plan`, the doctor): a
    backbone's sources may be left unset (their names count), every other value is checked."""
    backbone = cfg.backbone
    sources = backbone.get("sources") or {}
    search = cfg.search
    k = positive_int(search.k, "search.k")
    max_tokens = positive_int(search.max_tokens, "search.max_tokens")
    revision = backbone.get("revision")
    return PlanOptions(
        engine=engine_options(cfg.engine),
        k=k,
        max_tokens=max_tokens,
        base=str(backbone.base),
        revision=None if revision is None else str(revision),
        sources={str(key): None if OmegaConf.is_missing(sources, key) else str(sources[key]) for key in sources},
        sparsify=from_section(SparsifyConfig, cfg.sparsify, "sparsify"),
    )


def check_backbone(cfg: DictConfig) -> BackboneOptions:
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
    max_tokens = positive_int(backbone.max_tokens, "backbone.max_tokens")
    if cfg.get("pool") is None:
        raise DotsError(
            f"backbone {name} names no pool of queries: "
            "add pool=jsonl pool.path=FILE (or pool=parquet, hub, math_valid)"
        )
    revision = backbone.get("revision")
    return BackboneOptions(
        name=str(name),
        base=str(backbone.base),
        sources={str(k): str(v) for k, v in sources.items()},
        prompt=str(backbone.prompt),
        max_tokens=max_tokens,
        revision=None if revision is None else str(revision),
        config_from=str(backbone.get("config_from") or "base"),
    )


def search_options(cfg: DictConfig) -> SearchOptions:
    """Every option of a search checked into SearchOptions, or a one-line DotsError."""
    seed = whole_number(cfg.seed, "seed")
    backbone = check_backbone(cfg)
    search = study_options(cfg.search)
    sampler = sampler_options(cfg.sampler)
    sparsify = from_section(SparsifyConfig, cfg.sparsify, "sparsify")
    selection = from_section(SelectionConfig, cfg.selection, "selection")
    pick = check_choice(cfg.pick, PICKS, "pick")
    confirm = from_section(ConfirmOptions, cfg.get("confirm"), "confirm")
    if pick == "agreement" and selection.strategy == "random":
        raise DotsError(
            "pick=agreement compares with the sources' answers, which selection.strategy=random does not draw"
        )
    tracking = tracking_options(cfg.get("tracking"))
    engine = engine_options(cfg.engine)
    export = from_section(ExportOptions, cfg.export, "export")
    config = to_plain(cfg)
    return SearchOptions(
        seed=seed,
        run_dir=str(cfg.run_dir) if cfg.run_dir else None,
        cache_dir=str(cfg.cache_dir) if cfg.get("cache_dir") else None,
        replace_run=check_flag(cfg.replace_run, "replace_run"),
        backbone=backbone,
        pool=config["pool"],
        sparsify=sparsify,
        selection=selection,
        search=search,
        sampler=sampler,
        pick=pick,
        confirm=confirm,
        export=export,
        tracking=tracking,
        engine=engine,
        config=config,
    )


def config_yaml(config: Mapping[str, Any]) -> str:
    """The resolved config as the run directory's config.yaml holds it."""
    return OmegaConf.to_yaml(OmegaConf.create(dict(config)))
