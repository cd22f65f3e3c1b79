"""The synthetic engine of benchmarks/search/prune_stop.py `simulate`: the Engine protocol without a model.
Each query's answer is right with a probability that falls with the distance of λ from an
optimum; the prompts' NLL is a quadratic in λ with its own optimum (`ppl_center`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dots.scoring.sampling import Sampling


class SynthEngine:
    """The Engine protocol without a model (for `simulate`): answers and NLL are functions of λ."""

    def __init__(self, ppl_center: tuple[float, float]):
        self.lam: dict = {}
        self.center = ppl_center

    def swap_coefficients(self, coefficients: Any) -> None:
        self.lam = dict(coefficients)

    def prompt_nll(self, texts: Any) -> list:
        from dots.scoring import PromptNLL

        a, b = self.lam["a"], self.lam["b"]
        nll = 1.0 + (a - self.center[0]) ** 2 + 0.5 * (b - self.center[1]) ** 2
        return [PromptNLL(5 * nll, 5) for _ in texts]

    def generate(self, prompts: Any, sampling: Sampling) -> list:
        import hashlib
        import random

        a, b = self.lam["a"], self.lam["b"]
        out = []
        for prompt in prompts:
            d = int(prompt.split()[1])
            right = max(0.05, min(0.98, 0.95 - 0.3 * ((a - 1.2) ** 2 + (b - 1.0) ** 2) - 0.01 * (d % 30)))
            rng = random.Random(hashlib.sha256(f"{prompt}|{sampling.seed}|{a:.12f}|{b:.12f}".encode()).digest())
            out.append(
                [
                    f"\\boxed{{{d}}}" if rng.random() < right else f"\\boxed{{{rng.randint(0, 3)}}}"
                    for _ in range(sampling.n)
                ]
            )
        return out
