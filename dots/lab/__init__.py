"""The lab: a small base/SFT/RLVR trio trained on CPU (the embedded default backbone).

`ensure_trio(overrides)` returns {'base', 'sft', 'rlvr'} model directories: the trio
shipped in dots/data/lab for the default settings, else built on first use
(conf/lab.yaml + key=value overrides; cached under <outputs root>/lab). Importing this package
registers the pool kind `lab` (conf/pool/lab.yaml: `dots.lab.tasks.pool_queries`) in
`dots.io.problems.POOL_KINDS`; `dots.options.compose` registers the config resolver `lab`, so a config
can say `base: ${lab:base}` or, with lab overrides, `${lab:rlvr,'seed=1'}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dots.io.problems import POOL_KINDS, Query


def ensure_trio(overrides: Sequence[str] | None = None, shipped: bool = True) -> dict[str, Path]:
    """Paths of the lab's base, SFT and RLVR checkpoints (shipped, or built on demand and cached)."""
    from dots.lab.build import ensure_trio as _ensure

    return _ensure(list(overrides or []), shipped)


def _pool(cfg: Any) -> list[Query]:
    """The queries of a `kind: lab` pool (each one's skill as its source)."""
    from dots.lab.tasks import pool_queries

    return [
        Query(str(r["id"]), str(r["question"]), str(r["answer"]), str(r.get("skill", "lab"))) for r in pool_queries(cfg)
    ]


POOL_KINDS.register("lab", _pool)

__all__ = ["ensure_trio"]
