"""Stable keys: short hashes of JSON-able data (cache entries, run directories) and
per-name seeds (random masks that do not depend on processing order)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["name_seed", "stable_hash"]


def stable_hash(obj: Any, n: int = 16) -> str:
    """First `n` hex digits of the SHA-256 of `obj` as canonical JSON (sorted keys; values
    JSON cannot hold are written with `str`)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def name_seed(name: str, seed: int) -> int:
    """A 63-bit seed that depends only on (name, seed), never on processing order."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
