"""What a search run is: the settings its results depend on, and its run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.keys import stable_hash
from dots.paths import outputs_root
from dots.plain import to_plain

# search.* options that do not change a run's results: the trial count (so it can be raised
# later), where the study lives, and how the work is shared between workers
NOT_IDENTITY = ("n_trials", "storage", "workers", "worker", "heartbeat_s", "grace_s", "fixed")
# options that count only when they differ from the value every run had before the option
# existed, so that earlier runs keep their identity (run directory, study name, stage keys)
IDENTITY_ONLY_IF_NOT = {
    "search": {"granularity": "model", "consistency": "majority", "perplexity": "tokens"},
    "sparsify": {"cut": "exact"},
    "selection": {"split": "median"},
}


def _section(cfg: Any, name: str, leave_out: tuple[str, ...] = ()) -> dict:
    """cfg.<name> as plain data without `leave_out` and without options at their old default."""
    defaults = IDENTITY_ONLY_IF_NOT.get(name, {})
    return {
        k: v for k, v in to_plain(cfg[name]).items() if k not in leave_out and not (k in defaults and v == defaults[k])
    }


def check_range(bounds: Sequence[float]) -> tuple[float, float]:
    """search.range as (low, high) with 0 <= low < high, else a DotsError."""
    if len(bounds) != 2:
        raise DotsError(f"search.range must be [low, high], got {list(bounds)}")
    lo, hi = float(bounds[0]), float(bounds[1])
    if lo < 0 or hi < 0:
        raise DotsError(f"search.range must not be negative, got [{lo}, {hi}]")
    if hi <= lo:
        raise DotsError(f"search.range is inverted or empty: [{lo}, {hi}] (need low < high)")
    return lo, hi


def run_identity(cfg: Any, base: Checkpoint, sources: Mapping[str, Checkpoint]) -> dict:
    """What a run's results depend on (the trial count excluded, so it can be raised later;
    options added later, such as search.granularity, only away from their old default, so a
    run keeps the identity it had before they existed)."""
    return {
        "base": base.fingerprint(),
        "sources": {k: v.fingerprint() for k, v in sources.items()},
        "sparsify": _section(cfg, "sparsify"),
        "selection": _section(cfg, "selection"),
        "pool": to_plain(cfg.pool),
        "search": _section(cfg, "search", NOT_IDENTITY),
        "sampler": to_plain(cfg.sampler),
        "prompt": cfg.backbone.prompt,
        "seed": cfg.seed,
    }


def resolve_run_dir(cfg: Any, identity: dict) -> Path:
    """`run_dir=` when given, else <outputs root>/search/<backbone>-<hash of the identity>."""
    if cfg.run_dir:
        return Path(str(cfg.run_dir)).expanduser()
    return outputs_root() / "search" / f"{cfg.backbone.name}-{stable_hash(identity, 8)}"
