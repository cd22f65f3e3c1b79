"""The selection's options (conf/search.yaml `selection:`, docs/method.md §3) as a typed, frozen
object checked when made. Defaults are conf/search.yaml's (tests/test_option_defaults.py)."""

from __future__ import annotations

from dataclasses import dataclass

from dots.checks import check_choice, number_in, positive_int, whole_number
from dots.errors import DotsError
from dots.options.study import check_sampling

__all__ = ["SelectionConfig"]

STRATEGIES = ("balanced", "random", "easy", "medium")
# median: low = D ≤ median of D (docs/method.md §3); half: the queries sorted by D, the first
# ⌊N/2⌋ low and the rest medium (the official DoTS code, `preset=official`)
SPLITS = ("median", "half")
SOURCES = ("original", "sparsified")  # original checkpoints, or sparsified θ0 + τ̃_i


@dataclass(frozen=True)
class SelectionConfig:
    """n adaptation queries from m samples per source and query (dots.search.selection)."""

    n: int = 64
    m: int = 5
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 512  # (conf: the backbone's max_tokens)
    threshold: float | None = None  # drop D > threshold; None = 1 − 1/m
    easy_fraction: float = 0.5
    strategy: str = "balanced"
    source: str = "original"
    split: str = "median"
    seed: int = 0  # (conf: the run's seed)
    batch: int = 64  # queries per generate call

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        for key in ("n", "m", "batch"):
            put(key, positive_int(getattr(self, key), f"selection.{key}"))
        sampling = check_sampling(self.temperature, self.top_p, self.max_tokens, "selection")
        for name, value in zip(("temperature", "top_p", "max_tokens"), sampling):
            put(name, value)
        if self.threshold is not None:
            put("threshold", number_in(self.threshold, "selection.threshold", 0.0, 1.0))
        put("easy_fraction", number_in(self.easy_fraction, "selection.easy_fraction", 0.0, 1.0))
        if self.strategy not in STRATEGIES:
            raise DotsError(f"selection.strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.split not in SPLITS:
            raise DotsError(f"selection.split must be one of {SPLITS}, got {self.split!r}")
        check_choice(self.source, SOURCES, "selection.source")
        put("seed", whole_number(self.seed, "selection.seed"))

    @property
    def drop_above(self) -> float:
        return 1.0 - 1.0 / self.m if self.threshold is None else float(self.threshold)
