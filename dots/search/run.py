"""What the stages of one search share (`Run`): made by `pipeline.prepare`, filled by the stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dots.engines.base import Engine
from dots.io.align import Alignment
from dots.io.problems import Query
from dots.options.search import SearchOptions
from dots.search.study.granularity import param_names
from dots.search.study.tracking import Tracking
from dots.vectors.cache import TaskVectors


@dataclass
class RunResults:
    """Each stage's result, under the stage's name (`search.pipeline.search_stages`); None until it ran."""

    task_vectors: TaskVectors | None = None
    selection: list[Query] | None = None
    study: Any = None  # optuna.Study
    confirm: dict[str, Any] | None = None  # confirm.json's content (confirm.enabled)
    pick: dict[str, Any] | None = None  # result.yaml's content
    export: Path | None = None  # the exported model's directory
    push: bool | None = None  # pushed to the Hub


@dataclass
class Run:
    """What the stages of one search share: its options, inputs and the live engine."""

    options: SearchOptions
    run_dir: Path
    alignment: Alignment
    identity: dict
    fixed: list[list[float]] | None  # each point as the values of `param_names`
    queries: list[Query] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    tokenizer: Any = None
    engine: Engine = field(init=False, repr=False)  # set by pipeline.run_in: a LazyEngine, started on first use
    results: RunResults = field(default_factory=RunResults)
    tracking: Tracking = field(default_factory=lambda: Tracking(None))  # tracking=none until opened

    @property
    def bounds(self) -> tuple[float, float]:
        """search.range as (low, high)."""
        return self.options.search.range

    @property
    def granularity(self) -> str:
        return self.options.search.granularity

    @property
    def task_vectors(self) -> TaskVectors:
        assert self.results.task_vectors is not None, "the task_vectors stage runs first"
        return self.results.task_vectors

    @property
    def selection(self) -> list[Query]:
        assert self.results.selection is not None, "the selection stage runs before this one"
        return self.results.selection

    @property
    def sources(self) -> list[str]:
        return self.task_vectors.sources

    @property
    def param_names(self) -> list[str]:
        """The study's Optuna parameters (`lambda_<source>[_<group>]`)."""
        return param_names(self.sources, self.granularity)
