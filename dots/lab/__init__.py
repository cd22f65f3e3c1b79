"""The lab: a small base/SFT/RLVR trio trained on CPU (the embedded default backbone).

`ensure_trio(overrides)` returns {'base', 'sft', 'rlvr'} model directories: the trio
shipped in dots/data/lab for the default settings, else built on first use
(conf/lab.yaml + key=value overrides; cached under <outputs root>/lab). Importing this package registers the
OmegaConf resolver `lab`, so a config can say `base: ${lab:base}` or, with lab
overrides, `${lab:rlvr,'seed=1'}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf


def ensure_trio(overrides: Sequence[str] | None = None, shipped: bool = True) -> dict[str, Path]:
    """Paths of the lab's base, SFT and RLVR checkpoints (shipped, or built on demand and cached)."""
    from dots.lab.build import ensure_trio as _ensure

    return _ensure(list(overrides or []), shipped)


def _resolve_lab(stage: str, *overrides: str) -> str:
    from dots.errors import DotsError

    paths = ensure_trio(list(overrides))
    if stage not in paths:
        raise DotsError(f"${{lab:{stage}}}: the lab has no stage {stage!r} (base, sft, rlvr)")
    return str(paths[stage])


OmegaConf.register_new_resolver("lab", _resolve_lab, replace=True)

__all__ = ["ensure_trio"]
