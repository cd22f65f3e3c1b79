"""One trial's score (DoTS §4.3): swap λ into the live engine, perplexity ↓ of the adaptation
prompts, then k answers per query (or fewer, adaptively: dots.search.study.adaptive) in blocks of
`search.batch` queries, consistency ↑ (Eq. 4); a trial that can no longer reach the Pareto front
stops between blocks (`search.prune`, dots.search.study.pruning)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from dots.options.study import StudyOptions
from dots.runtime.timing import DeviceTimer, device_of
from dots.scoring.grade import answer_labels, consistency_and_majority
from dots.scoring.perplexity import perplexity
from dots.scoring.sampling import Sampling
from dots.search.study.adaptive import sample_adaptively
from dots.search.study.pruning import DEFAULT_BATCH
from dots.vectors.coefficients import Coefficients

if TYPE_CHECKING:
    from dots.engines.base import Engine

__all__ = ["Scorer", "TrialResult", "trial_seed"]


@dataclass
class TrialResult:
    consistency: float
    perplexity: float
    per_query: list[float]
    tokens: int
    times: dict[str, float]
    samples: int = 0  # completions drawn (k per query, fewer with adaptive sampling)
    answers: list[str | None] | None = None  # each query's majority answer (None: no answer)
    pruned: dict | None = None  # the pruning record (dots.search.study.pruning.PRUNED_BY) of a stopped trial
    seed: int | None = None  # the sampling seed it was scored with (trial_seed; blocks add b·BLOCK_SEED)


def trial_seed(seed: int, number: int, seeds: str) -> int:
    """The sampling seed of trial `number`: the run's seed for every trial under `common` (common
    random numbers: nearby trials draw the same numbers, so their C differ less by chance,
    docs/method.md §4), seed + number under `per_trial` (independent draws)."""
    return int(seed) if seeds == "common" else int(seed) + int(number)


BLOCK_SEED = 1_000_003  # block b of a trial samples with seed + b·BLOCK_SEED (block 0: the trial's seed)


class Scorer:
    """Evaluates one λ on the live engine: swap → generate k → consistency; prompt NLL → PPL."""

    def __init__(self, engine: Engine, prompts: list[str], options: StudyOptions, tokenizer: Any = None):
        self.engine = engine
        self.prompts = prompts
        self.k = options.k
        self.temperature = options.temperature
        self.top_p = options.top_p
        self.max_tokens = options.max_tokens
        self.mode = options.answer_mode
        self.rule = options.consistency
        self.ppl_mean = options.perplexity
        self.adaptive = options.adaptive
        self.tokenizer = tokenizer
        self.prune = options.prune
        batch = options.batch
        self.batch = batch if batch else (DEFAULT_BATCH if self.prune else len(prompts))
        self.pruner: Callable[[list[float], int, float], dict | None] | None = None  # set by pruning.attach

    def _generate(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        sampling = Sampling(n=n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=seed)
        return self.engine.generate(prompts, sampling)

    def sample(self, prompts: list[str], seed: int) -> list[list[str]]:
        """k samples per prompt, or fewer where adaptive sampling settles a query's majority."""
        if not self.adaptive.enabled:
            return self._generate(prompts, self.k, seed)
        label = partial(answer_labels, mode=self.mode)
        return sample_adaptively(prompts, self.k, self._generate, label, self.adaptive, seed)

    def __call__(self, coefficients: Coefficients, seed: int) -> TrialResult:
        start = getattr(self.engine, "start", None)  # a LazyEngine: its start is not the trial's swap
        engine_start = start() if callable(start) else 0.0
        with DeviceTimer(device_of(self.engine)) as swap:  # until the device has the new weights
            self.engine.swap_coefficients(dict(coefficients))
        t0, t1 = swap.started, swap.stopped
        ppl = perplexity(self.engine.prompt_nll(self.prompts), self.ppl_mean)
        t2 = time.perf_counter()
        outs: list[list[str]] = []
        per_query: list[float] = []
        graded: list[tuple[float, str | None]] = []
        pruned = None
        spent = {"generate": 0.0, "consistency": 0.0}
        n = len(self.prompts)
        for block, first in enumerate(range(0, n, self.batch)):
            began = time.perf_counter()
            got = self.sample(self.prompts[first : first + self.batch], seed + block * BLOCK_SEED)
            scored = time.perf_counter()
            outs += got
            graded += [consistency_and_majority(samples, self.mode, self.rule) for samples in got]
            per_query = [c for c, _ in graded]
            spent["generate"] += scored - began
            spent["consistency"] += time.perf_counter() - scored
            if self.pruner is not None and len(per_query) < n:
                pruned = self.pruner(per_query, n, ppl)
                if pruned:
                    break
        t4 = time.perf_counter()
        texts = [s for samples in outs for s in samples]
        if self.tokenizer is not None:
            tokens = (
                sum(len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else 0
            )
        else:
            tokens = sum(len(s) for s in texts)
        return TrialResult(
            sum(per_query) / len(per_query),
            ppl,
            per_query,
            tokens,
            {
                "swap": t1 - t0,
                **spent,
                "perplexity": t2 - t1,
                "total": t4 - t0,
                "engine_start": engine_start,
            },
            len(texts),
            [answer for _, answer in graded],
            pruned,
            int(seed),
        )


class LazyEngine:
    """Starts the engine on first use, so a finished run resumes without loading a model."""

    def __init__(self, factory: Callable[[], Engine]):
        self._factory = factory
        self._engine: Engine | None = None

    def __getattr__(self, name: str) -> Any:
        self.start()
        return getattr(self._engine, name)

    def start(self) -> float:
        """Start the engine if it is not running; the seconds that took (0 when it was)."""
        if self._engine is not None:
            return 0.0
        began = time.perf_counter()
        self._engine = self._factory()
        return time.perf_counter() - began

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
