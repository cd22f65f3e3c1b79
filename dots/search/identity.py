"""What a search run is: the settings its results depend on, and its run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dots.io.checkpoint import Checkpoint
from dots.keys import stable_hash
from dots.options.search import SearchOptions
from dots.paths import outputs_root
from dots.plain import to_plain

__all__ = ["NOT_IDENTITY", "run_identity"]

# search.* options that do not change a run's results: the trial count (so it can be raised
# later), where the study lives, and how the work is shared between workers
NOT_IDENTITY = ("n_trials", "storage", "workers", "worker", "heartbeat_s", "grace_s", "fixed", "stop")
# options that count only when they differ from the value every run had before the option
# existed, so that earlier runs keep their identity (run directory, study name, stage keys)
IDENTITY_ONLY_IF_NOT: dict[str, dict[str, Any]] = {
    "search": {
        "granularity": "model",
        "consistency": "majority",
        "perplexity": "tokens",
        "batch": None,
        "prune": False,
        "seeds": "per_trial",
    },
    "sparsify": {"cut": "exact"},
    "selection": {"split": "median"},
}


def _section(config: Mapping[str, Any], name: str, leave_out: tuple[str, ...] = ()) -> dict:
    """config[name] as plain data without `leave_out` and without options at their old default."""
    defaults = IDENTITY_ONLY_IF_NOT.get(name, {})
    return {
        k: v
        for k, v in to_plain(config[name]).items()
        if k not in leave_out and not (k in defaults and v == defaults[k])
    }


def run_identity(config: Mapping[str, Any], base: Checkpoint, sources: Mapping[str, Checkpoint]) -> dict:
    """What a run's results depend on, from the resolved config as written (`SearchOptions.config`;
    the trial count excluded, so it can be raised later; options added later, such as
    search.granularity, only away from their old default, so a run keeps the identity it had
    before they existed)."""
    return {
        "base": base.fingerprint(),
        "sources": {k: v.fingerprint() for k, v in sources.items()},
        "sparsify": _section(config, "sparsify"),
        "selection": _section(config, "selection"),
        "pool": to_plain(config["pool"]),
        "search": _section(config, "search", NOT_IDENTITY),
        "sampler": to_plain(config["sampler"]),
        "prompt": config["backbone"]["prompt"],
        "seed": config["seed"],
    }


def resolve_run_dir(options: SearchOptions, identity: dict) -> Path:
    """`run_dir=` when given, else <outputs root>/search/<backbone>-<hash of the identity>."""
    if options.run_dir:
        return Path(options.run_dir).expanduser()
    return outputs_root() / "search" / f"{options.backbone.name}-{stable_hash(identity, 8)}"
