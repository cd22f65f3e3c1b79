"""The τ̃ cache: each source's sparsified task vector on disk, shared by runs (docs/method.md §1).

An entry holds τ̃_i = γ·(θ_i − θ0)⊙M_i (DoTS Eq. 3) in compact form (`dots.vectors.compact`):
per merged tensor, where M_i keeps an entry (a bitmask or sorted positions, whichever is
smaller) and θ_i's own values there in the checkpoint's dtype — 0.725 bytes per parameter
for bf16 at density 0.3, against 4 for the dense float32 τ⊙M of cache version 1. The
scale γ (one per source for `rescale: global`, one per tensor for `rescale: tensor`) and
each tensor's form are in `taskvec.json`. τ̃ is rebuilt against θ0 when read
(`TaskVectors.get`, `TaskVectors.compact` for the synthesis), bit for bit the dense values
where they matter (the merged weights are identical).

Each source's entry is keyed by a hash of (cache version, base, source, options), so a
source reused with another partner, or by another run, is not recomputed; concurrent
workers build an entry once (a run-once lock). An entry of another cache version is
rebuilt, never read. One entry's files, read and written: `dots.vectors.entry`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Mapping

import torch

from dots.errors import DotsError
from dots.io.align import Alignment, align
from dots.io.checkpoint import Checkpoint
from dots.io.destination import claim, input_paths
from dots.io.inputs import taskvec_dir
from dots.keys import stable_hash
from dots.runtime.locks import run_once_lock
from dots.vectors.compact import CompactTensor
from dots.vectors.entry import CACHE_VERSION, EXTRA_SUFFIX, SourceVector, reusable_entry, write_entry
from dots.vectors.sparsify import SparsifyConfig

__all__ = ["CACHE_VERSION", "TaskVectors", "build_task_vectors", "cache_key"]

log = logging.getLogger(__name__)


def default_cache_root() -> Path:
    """Where task-vector entries live: <cache root>/taskvec (`dots.io.inputs.taskvec_dir`)."""
    return taskvec_dir(None)


class TaskVectors:
    """The sparsified task vectors of K sources over one base (the τ̃ cache)."""

    def __init__(self, base_path: Path, entries: Mapping[str, SourceVector], names: list[str], copied: list[str]):
        self.base_path = Path(base_path)
        self.entries = dict(entries)
        self.names = list(names)
        self.copied = list(copied)
        self._base: Checkpoint | None = None

    @property
    def sources(self) -> list[str]:
        return list(self.entries)

    @property
    def base(self) -> Checkpoint:
        if self._base is None:
            self._base = Checkpoint(self.base_path)
        return self._base

    def compact(self, source: str, name: str) -> CompactTensor:
        """τ̃ of `source` for tensor `name` in compact form (what the synthesis reads)."""
        return self.entries[source].compact(name)

    def get(self, source: str, name: str, theta0: torch.Tensor | None = None) -> torch.Tensor:
        """τ̃ of `source` for tensor `name`, float32 (base rows only), rebuilt against θ0 —
        `theta0` when given (any float dtype, the base's values), else read from the base."""
        return self.entries[source].get(name, theta0 if theta0 is not None else self.base.get(name))

    def extra_rows(self, name: str) -> torch.Tensor | None:
        for entry in self.entries.values():
            key = name + EXTRA_SUFFIX
            if key in entry.weights:
                return entry.weights.get(key)
        return None

    def spec(self) -> dict:
        """A JSON-able description another process can reopen with `TaskVectors.from_spec`."""
        return {
            "base": str(self.base_path),
            "names": self.names,
            "copied": self.copied,
            "sources": {k: str(v.path) for k, v in self.entries.items()},
        }

    @classmethod
    def from_spec(cls, spec: Mapping) -> TaskVectors:
        entries = {}
        for key, path in spec["sources"].items():
            meta = json.loads((Path(path) / "taskvec.json").read_text())
            if meta.get("version") != CACHE_VERSION:
                raise DotsError(
                    f"task-vector cache entry {path} has version {meta.get('version')}, this dots reads "
                    f"{CACHE_VERSION}: rebuild it (build_task_vectors)"
                )
            entries[key] = SourceVector(key, Path(path), meta)
        return cls(Path(spec["base"]), entries, spec["names"], spec["copied"])

    def stats(self) -> dict[str, dict]:
        return {
            k: {f: v.meta[f] for f in ("norm", "kept_norm", "gamma", "kept", "numel")} for k, v in self.entries.items()
        }


# --- building ---------------------------------------------------------------------------


def cache_key(base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig, version: int = CACHE_VERSION) -> str:
    """The folder name of the entry of `source` over `base` with options `cfg`, written by cache `version`."""
    return stable_hash({"v": version, "base": base.fingerprint(), "source": source.fingerprint(), "cfg": cfg.key()}, 20)


def _note_older_entries(root: Path, base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig) -> None:
    """Log the entries earlier cache versions left for these inputs: never read again, they
    hold disk (version 1: 4 bytes per parameter), and an older dots may still use them."""
    for version in range(1, CACHE_VERSION):
        old = root / cache_key(base, source, cfg, version)
        if old.is_dir():
            size = sum(f.stat().st_size for f in old.iterdir() if f.is_file())
            log.warning(
                "an entry of task-vector cache version %d remains at %s (%.2f GB): delete it", version, old, size / 1e9
            )


def build_task_vectors(
    base: Checkpoint,
    sources: Mapping[str, Checkpoint],
    cfg: SparsifyConfig = SparsifyConfig(),
    cache_root: str | os.PathLike | None = None,
    alignment: Alignment | None = None,
) -> TaskVectors:
    """τ̃ for every source, from the cache when its inputs, options and version are unchanged."""
    al = alignment or align(base, sources)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    # new, empty, or a τ̃ cache (recorded, or an older dots' entries only): never a folder of other files
    claim(root, "taskvec-cache", inputs=input_paths([base, *sources.values()])).create()
    entries: dict[str, SourceVector] = {}
    for key, ckpt in sources.items():
        out = root / cache_key(base, ckpt, cfg)
        meta_file = out / "taskvec.json"
        with run_once_lock(root / f".{out.name}.lock"):  # concurrent workers build an entry once
            cached = reusable_entry(out, key, al) if meta_file.exists() else None
            if cached is not None:
                log.info("source %s: reusing cached task vector %s", key, out)
                entries[key] = cached
            else:
                entries[key] = write_entry(al, key, cfg, out)
                _note_older_entries(root, base, ckpt, cfg)
    return TaskVectors(base.path, entries, al.merged, al.copied)
