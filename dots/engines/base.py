"""The Engine protocol: one live model per run whose weights are swapped in place."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol, Sequence, runtime_checkable

import torch

from dots.scoring.perplexity import PromptNLL
from dots.vectors.coefficients import Coefficients


@runtime_checkable
class Engine(Protocol):
    """What the search, the selection, the evaluation and the lab scorer need of a model.

    `swap_*` replace the live weights without restarting; after a swap, generation and
    perplexity see only the new weights (no cached prefix from the old ones).
    """

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        seed: int | None = None,
    ) -> list[list[str]]:
        """n completions per prompt (temperature 0 = greedy)."""
        ...

    def prompt_nll(self, texts: Sequence[str]) -> list[PromptNLL]: ...

    def swap_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load (name, tensor) pairs in checkpoint naming into the live model."""
        ...

    def swap_checkpoint(self, path: str | Path) -> None: ...

    def swap_coefficients(self, coefficients: Coefficients) -> None:
        """θ0 + Σ λ_i τ̃_i from the engine's task-vector cache (SPEC §2); λ per source, or per
        source and module group (`dots.vectors.coefficients`)."""
        ...

    def close(self) -> None: ...
