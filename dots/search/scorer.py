"""One trial's score (DoTS §4.3): swap λ into the live engine, sample k answers per query
(or fewer, adaptively: dots.search.adaptive), consistency ↑ (Eq. 4) and perplexity ↓ of the
adaptation prompts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from dots.plain import to_plain
from dots.scoring.grade import answer_labels, consistency_and_majority
from dots.scoring.perplexity import perplexity
from dots.search.adaptive import AdaptiveConfig, sample_adaptively
from dots.vectors.coefficients import Coefficients


@dataclass
class TrialResult:
    consistency: float
    perplexity: float
    per_query: list[float]
    tokens: int
    times: dict[str, float]
    samples: int = 0  # completions drawn (k per query, fewer with adaptive sampling)
    answers: list[str | None] | None = None  # each query's majority answer (None: no answer)


class Scorer:
    """Evaluates one λ on the live engine: swap → generate k → consistency; prompt NLL → PPL."""

    def __init__(self, engine: Any, prompts: list[str], cfg: Any, tokenizer: Any = None):
        self.engine = engine
        self.prompts = prompts
        self.k = int(cfg.search.k)
        self.temperature = float(cfg.search.temperature)
        self.top_p = float(cfg.search.top_p)
        self.max_tokens = int(cfg.search.max_tokens)
        self.mode = str(cfg.search.get("answer_mode", "math"))
        self.rule = str(cfg.search.get("consistency", "majority"))
        self.ppl_mean = str(cfg.search.get("perplexity", "tokens"))
        self.adaptive = AdaptiveConfig(**to_plain(cfg.search.get("adaptive") or {}))
        self.tokenizer = tokenizer

    def _generate(self, prompts: list[str], n: int, seed: int) -> list[list[str]]:
        return self.engine.generate(
            prompts, n=n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=seed
        )

    def sample(self, seed: int) -> list[list[str]]:
        """k samples per prompt, or fewer where adaptive sampling settles a query's majority."""
        if not self.adaptive.enabled:
            return self._generate(self.prompts, self.k, seed)
        label = partial(answer_labels, mode=self.mode)
        return sample_adaptively(self.prompts, self.k, self._generate, label, self.adaptive, seed)

    def __call__(self, coefficients: Coefficients, seed: int) -> TrialResult:
        start = getattr(self.engine, "start", None)  # a LazyEngine: its start is not the trial's swap
        engine_start = start() if callable(start) else 0.0
        t0 = time.perf_counter()
        self.engine.swap_coefficients(dict(coefficients))
        t1 = time.perf_counter()
        outs = self.sample(seed)
        t2 = time.perf_counter()
        graded = [consistency_and_majority(samples, self.mode, self.rule) for samples in outs]
        per_query = [c for c, _ in graded]
        t3 = time.perf_counter()
        ppl = perplexity(self.engine.prompt_nll(self.prompts), self.ppl_mean)
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
                "generate": t2 - t1,
                "consistency": t3 - t2,
                "perplexity": t4 - t3,
                "total": t4 - t0,
                "engine_start": engine_start,
            },
            len(texts),
            [answer for _, answer in graded],
        )


class LazyEngine:
    """Starts the engine on first use, so a finished run resumes without loading a model."""

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._engine: Any = None

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
