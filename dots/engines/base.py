"""The Engine protocol: one live model per run whose weights are swapped in place."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from dots.errors import DotsError
from dots.scoring.perplexity import PromptNLL
from dots.scoring.sampling import Sampling
from dots.vectors.coefficients import Coefficients

if TYPE_CHECKING:
    from dots.io.checkpoint import Checkpoint

__all__ = ["Engine"]


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
    """What the search, the selection, the evaluation, the swap canary, the doctor and the lab
    scorer need of a model (both engines provide it: tests/test_engine_protocol.py).

    `swap_*` replace the live weights without restarting; after a swap, generation and
    perplexity see only the new weights (no cached prefix from the old ones). `swap_path` is
    "fast" (written into the live parameters) until `use_public_path` makes it "public"
    (the framework's own loading path, the swap canary's fallback).
    """

    model_path: Path  # the checkpoint the engine started on
    tokenizer: Any
    task_vectors: Any  # the τ̃ cache (`dots.vectors.cache.TaskVectors`) swap_coefficients reads, or None
    synth_cache: str  # where τ̃ is held: memory, disk or auto (`dots.vectors.residency`)
    resident_form: str  # the form τ̃ is held in when resident (`dots.vectors.forms`)
    swap_path: str

    def generate(self, prompts: Sequence[str], sampling: Sampling = Sampling()) -> list[list[str]]:
        """`sampling.n` completions per prompt (temperature 0 = greedy)."""
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

    def swap_coefficients_public(self, coefficients: Coefficients) -> None:
        """The same swap through the framework's public loading path (the canary compares the two)."""
        ...

    def use_public_path(self) -> None:
        """Every later swap through the public loading path."""
        ...

    def set_task_vectors(
        self, task_vectors: Any, synth_cache: str | None = None, *, resident_form: str | None = None
    ) -> None:
        """Swap from another τ̃ cache (None: none), held as `synth_cache` and `resident_form` say
        (None: as before)."""
        ...

    def close(self) -> None: ...
