"""What the stages of one search share (`Run`): made by `pipeline.prepare`, filled by the stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dots.engines.base import Engine
from dots.io.align import Alignment
from dots.io.problems import Query
from dots.search.study.granularity import DEFAULT_GRANULARITY, param_names
from dots.search.study.tracking import Tracking
from dots.vectors.cache import TaskVectors


@dataclass
class Run:
    """What the stages of one search share: its config, inputs and the live engine."""

    cfg: DictConfig
    run_dir: Path
    alignment: Alignment
    identity: dict
    bounds: tuple[float, float]
    fixed: list[list[float]] | None  # each point as the values of `param_names`
    granularity: str = DEFAULT_GRANULARITY
    queries: list[Query] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    tokenizer: Any = None
    engine: Engine = field(init=False, repr=False)  # set by pipeline.run_in: a LazyEngine, started on first use
    results: dict[str, Any] = field(default_factory=dict)
    tracking: Tracking = field(default_factory=lambda: Tracking(None))  # tracking=none until opened

    @property
    def task_vectors(self) -> TaskVectors:
        return self.results["task_vectors"]

    @property
    def sources(self) -> list[str]:
        return self.task_vectors.sources

    @property
    def param_names(self) -> list[str]:
        """The study's Optuna parameters (`lambda_<source>[_<group>]`)."""
        return param_names(self.sources, self.granularity)
