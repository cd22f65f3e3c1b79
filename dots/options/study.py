"""The study's options (conf/search.yaml `search:`, the `sampler` group) as typed, frozen objects.

Each class checks its values when made (one line naming the option), so the study, the scorer
and the sampler take them without checking again. Field defaults are conf/search.yaml's and
conf/sampler/*.yaml's (tests/test_option_defaults.py); `max_tokens` has none (the backbone's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from dots.checks import check_choice, finite_number, number_in, positive_int
from dots.errors import DotsError
from dots.options.typed import from_section
from dots.plain import to_plain
from dots.registry import unknown
from dots.scoring.grade import CONSISTENCY_RULES
from dots.scoring.perplexity import PERPLEXITY_MEANS

__all__ = [
    "AdaptiveConfig",
    "DEFAULT_RANGE",
    "GRANULARITIES",
    "TRIAL_SEEDS",
    "SAMPLERS",
    "SamplerOptions",
    "StopRule",
    "StudyOptions",
    "sampler_options",
    "study_options",
]

INF = math.inf
ANSWER_MODES = ("math", "choice")
GRANULARITIES = ("model", "module")  # one λ per source | one per source and module group
TRIAL_SEEDS = ("common", "per_trial")  # every trial samples with the run's seed | seed + trial number
STOP_RULES = ("none", "hypervolume")
SAMPLERS = ("tpe", "gp", "nsga2", "random")  # dots.search.study.samplers builds each
DEFAULT_RANGE = (0.5, 2.0)  # search.range (conf/search.yaml; docs/lab.md, the five-lab study)


def check_sampling(temperature: Any, top_p: Any, max_tokens: Any, where: str) -> tuple[float, float, int]:
    """temperature >= 0, top_p in (0, 1], max_tokens >= 1 of a sampling section."""
    return (
        number_in(temperature, f"{where}.temperature", 0.0, INF),
        number_in(top_p, f"{where}.top_p", 0.0, 1.0, low_open=True),
        positive_int(max_tokens, f"{where}.max_tokens"),
    )


def check_range(bounds: Any) -> tuple[float, float]:
    """search.range as (low, high) with 0 <= low < high, both finite numbers, else a DotsError."""
    if isinstance(bounds, (str, bytes, Mapping)) or not isinstance(bounds, Sequence):
        raise DotsError(f"search.range must be [low, high], got {bounds!r}")
    if len(bounds) != 2:
        raise DotsError(f"search.range must be [low, high], got {list(bounds)}")
    lo, hi = (finite_number(b, f"search.range[{i}]") for i, b in enumerate(bounds))
    if lo < 0 or hi < 0:
        raise DotsError(f"search.range must not be negative, got [{lo}, {hi}]")
    if hi <= lo:
        raise DotsError(f"search.range is inverted or empty: [{lo}, {hi}] (need low < high)")
    return lo, hi


def _put(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class AdaptiveConfig:
    """search.adaptive: on or off, the first round's size, later rounds' size, the rule's confidence
    (dots.search.study.adaptive)."""

    enabled: bool = True
    first: int = 4
    step: int = 2
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise DotsError(f"search.adaptive.enabled must be true or false, got {self.enabled!r}")
        _put(self, "first", positive_int(self.first, "search.adaptive.first"))
        _put(self, "step", positive_int(self.step, "search.adaptive.step"))
        confidence = number_in(self.confidence, "search.adaptive.confidence", 0.5, 1.0, high_open=True)
        _put(self, "confidence", confidence)


@dataclass(frozen=True)
class StopRule:
    """search.stop: the rule's name, its window W (scored trials) and its relative threshold
    (dots.search.study.stopping)."""

    rule: str = "hypervolume"
    window: int = 10
    threshold: float = 0.01

    def __post_init__(self) -> None:
        if self.rule not in STOP_RULES:
            raise DotsError(f"search.stop.rule must be one of {', '.join(STOP_RULES)}, got {self.rule!r}")
        _put(self, "window", positive_int(self.window, "search.stop.window"))
        _put(self, "threshold", number_in(self.threshold, "search.stop.threshold", 0.0, 1.0, high_open=True))


@dataclass(frozen=True)
class SamplerOptions:
    """The `sampler` group: its name and its options as written (each sampler reads its own)."""

    name: str = "tpe"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in SAMPLERS:
            raise unknown("sampler", self.name, SAMPLERS)
        population = self.settings.get("population_size")
        if self.name == "nsga2" and population is not None and positive_int(population, "sampler.population_size") < 2:
            raise DotsError(f"sampler.population_size must be >= 2, got {population}")

    @property
    def config(self) -> dict[str, Any]:
        """The group as written (name and options), as the study records it."""
        return {"name": self.name, **self.settings}


def sampler_options(section: Any) -> SamplerOptions:
    """conf/sampler/*.yaml as SamplerOptions."""
    values = dict(to_plain(section) or {})
    return SamplerOptions(str(values.pop("name", "tpe")), values)


@dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """conf/search.yaml `search:` — the study (trials, samples per query, λ's range and
    granularity, the objectives' rules, storage, workers, early stopping, fixed points)."""

    n_trials: int = 100
    n_startup_trials: int = 10
    k: int = 8
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    batch: int | None = None
    prune: bool = False
    stop: StopRule = field(default_factory=StopRule)
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int
    range: tuple[float, float] = DEFAULT_RANGE
    granularity: str = "model"
    seeds: str = "per_trial"
    answer_mode: str = "math"
    consistency: str = "majority"
    perplexity: str = "tokens"
    storage: str | None = None
    study_name: str | None = None
    workers: int = 1
    worker: int = 0
    heartbeat_s: float = 30.0
    grace_s: float = 120.0
    fixed: list[list[float]] | None = None  # as written; checked against the sources by the pipeline

    def __post_init__(self) -> None:
        _put(self, "n_trials", positive_int(self.n_trials, "search.n_trials"))
        _put(self, "k", positive_int(self.k, "search.k"))
        _put(self, "n_startup_trials", positive_int(self.n_startup_trials, "search.n_startup_trials", minimum=0))
        sampling = check_sampling(self.temperature, self.top_p, self.max_tokens, "search")
        for name, value in zip(("temperature", "top_p", "max_tokens"), sampling):
            _put(self, name, value)
        check_choice(self.answer_mode, ANSWER_MODES, "search.answer_mode")
        check_choice(self.consistency, CONSISTENCY_RULES, "search.consistency")
        check_choice(self.perplexity, PERPLEXITY_MEANS, "search.perplexity")
        check_choice(self.granularity, GRANULARITIES, "search.granularity")
        check_choice(self.seeds, TRIAL_SEEDS, "search.seeds")
        workers = positive_int(self.workers, "search.workers")
        worker = positive_int(self.worker, "search.worker", minimum=0)
        if worker >= workers:
            raise DotsError(f"search.worker must be below search.workers ({workers}), got {worker}")
        _put(self, "workers", workers)
        _put(self, "worker", worker)
        _put(self, "heartbeat_s", number_in(self.heartbeat_s, "search.heartbeat_s", 0.0, INF, low_open=True))
        _put(self, "grace_s", number_in(self.grace_s, "search.grace_s", 0.0, INF, low_open=True))
        _put(self, "range", check_range(self.range))
        if self.fixed is not None and not isinstance(self.fixed, list):
            raise DotsError(f"search.fixed must be a list of points, e.g. [[1,1],[0.5,0.5]], got {self.fixed!r}")
        if self.batch is not None:
            _put(self, "batch", positive_int(self.batch, "search.batch"))
        if not isinstance(self.prune, bool):
            raise DotsError(f"search.prune must be true or false, got {self.prune!r}")
        for name, cls in (("adaptive", AdaptiveConfig), ("stop", StopRule)):
            value = getattr(self, name)
            if not isinstance(value, cls):  # a mapping from the config
                _put(self, name, from_section(cls, value, f"search.{name}"))


def study_options(section: Any) -> StudyOptions:
    """conf/search.yaml `search:` (a DictConfig or mapping) as StudyOptions, or a one-line DotsError."""
    return from_section(StudyOptions, section, "search")
