"""What an engine is asked to draw for each prompt: `Sampling`, the one set of generation
options every Engine's `generate` takes (dots/engines/base.py) and every caller builds."""

from __future__ import annotations

from dataclasses import dataclass

from dots.errors import DotsError

__all__ = ["Sampling"]


@dataclass(frozen=True)
class Sampling:
    """n completions per prompt, at `temperature` (0: greedy, its n copies identical) and nucleus
    `top_p`, each at most `max_tokens` long; `seed` None draws from the engine's own state."""

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise DotsError(f"n must be >= 1, got {self.n}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0
