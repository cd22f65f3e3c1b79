"""The Engine protocol: one live model per run whose weights are swapped in place."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from dots.errors import DotsError
from dots.scoring.perplexity import PromptNLL
from dots.vectors.coefficients import Coefficients

if TYPE_CHECKING:
    from dots.io.checkpoint import Checkpoint


def check_swappable(ckpt: Checkpoint, shapes: Mapping[str, Sequence[int]], required: Iterable[str]) -> None:
    """A one-line DotsError when `ckpt` cannot be swapped into a live model whose tensors have
    `shapes`: tensors the model does not have, of another shape, or `required` ones missing."""
    unknown = [n for n in ckpt.names if n not in shapes]
    wrong = [n for n in ckpt.names if n in shapes and tuple(ckpt.info(n).shape) != tuple(shapes[n])]
    names = set(ckpt.names)
    missing = [n for n in required if n not in names]
    problems = (
        ([f"unknown tensor(s) {unknown[:3]}"] if unknown else [])
        + ([f"shape mismatch {wrong[:3]}"] if wrong else [])
        + ([f"missing {missing[:3]}"] if missing else [])
    )
    if problems:
        raise DotsError(f"cannot swap in {ckpt.path}: {'; '.join(problems)}")


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
        """θ0 + Σ λ_i τ̃_i from the engine's task-vector cache (docs/method.md §2); λ per source, or per
        source and module group (`dots.vectors.coefficients`)."""
        ...

    def close(self) -> None: ...
