"""The τ̃ cache: each source's sparsified task vector on disk, shared by runs (SPEC §1).

An entry stores τ⊙M (float32 safetensors, `dots.vectors.sparsify`) and the scale γ (one
per source for `rescale: global`, one per tensor for `rescale: tensor`) in
`taskvec.json`; `TaskVectors.get` applies it. Each source's entry is keyed by a hash of
(base, source, options), so a source reused with another partner, or by another run, is
not recomputed; concurrent workers build an entry once (a run-once lock).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import torch

from dots.errors import DotsError
from dots.io.align import Alignment, align
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.keys import stable_hash
from dots.locks import run_once_lock
from dots.paths import cache_root
from dots.vectors.sparsify import SparseStats, SparsifyConfig, sparsify_source

log = logging.getLogger(__name__)

CACHE_VERSION = 1
EXTRA_SUFFIX = ".__extra_rows__"


def default_cache_root() -> Path:
    """Where task-vector entries live: <cache root>/taskvec."""
    return cache_root() / "taskvec"


# --- building ---------------------------------------------------------------------------


@dataclass
class SourceVector:
    """One source's cached τ⊙M and its scales."""

    key: str
    path: Path
    meta: dict
    _ckpt: Checkpoint | None = None

    @property
    def weights(self) -> Checkpoint:
        if self._ckpt is None:
            self._ckpt = Checkpoint(self.path)
        return self._ckpt

    def scale(self, name: str) -> float:
        if self.meta["rescale"] == "tensor":
            return float(self.meta["tensor_gamma"][name])
        return float(self.meta["gamma"])

    def get(self, name: str) -> torch.Tensor:
        tensor = self.weights.get(name).float()
        gamma = self.scale(name)
        return tensor.mul_(gamma) if gamma != 1.0 else tensor  # get() returns private memory


class TaskVectors:
    """The sparsified task vectors of K sources over one base (the τ̃ cache)."""

    def __init__(self, base_path: Path, entries: Mapping[str, SourceVector], names: list[str], copied: list[str]):
        self.base_path = Path(base_path)
        self.entries = dict(entries)
        self.names = list(names)
        self.copied = list(copied)

    @property
    def sources(self) -> list[str]:
        return list(self.entries)

    def get(self, source: str, name: str) -> torch.Tensor:
        """τ̃ of `source` for tensor `name`, float32 (base rows only)."""
        return self.entries[source].get(name)

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
            entries[key] = SourceVector(key, Path(path), meta)
        return cls(Path(spec["base"]), entries, spec["names"], spec["copied"])

    def stats(self) -> dict[str, dict]:
        return {
            k: {f: v.meta[f] for f in ("norm", "kept_norm", "gamma", "kept", "numel")} for k, v in self.entries.items()
        }


def _cache_key(base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig) -> str:
    return stable_hash(
        {"v": CACHE_VERSION, "base": base.fingerprint(), "source": source.fingerprint(), "cfg": asdict(cfg)}, 20
    )


def _build_one(al: Alignment, key: str, cfg: SparsifyConfig, out: Path) -> SourceVector:
    """Sparsify source `key` (`sparsify_source`) into a new cache entry at `out`."""
    plan = {n: TensorInfo(al.base.info(n).shape, torch.float32) for n in al.merged}
    for name in al.extra_rows:
        if al.extra_rows[name] == key:
            rows = al.extra_rows_tensor(name)
            assert rows is not None
            plan[name + EXTRA_SUFFIX] = TensorInfo(tuple(rows.shape), al.base.info(name).dtype)
    stats = SparseStats()
    with CheckpointWriter(out, plan, max_shard_bytes=4 * 2**30, weights_name="tau") as writer:
        for name, sparse in sparsify_source(al, key, cfg, stats):
            writer.write(name, sparse)
        for name in plan:
            if name.endswith(EXTRA_SUFFIX):
                rows = al.extra_rows_tensor(name[: -len(EXTRA_SUFFIX)])
                assert rows is not None  # planned above only where it is
                writer.write(name, rows)
        meta = {
            "version": CACHE_VERSION,
            "source_key": key,
            "source": al.sources[key].source,
            "base": al.base.source,
            **asdict(cfg),
            "gamma": stats.gamma(cfg.rescale),
            "norm": stats.norm_sq**0.5,
            "kept_norm": stats.kept_sq**0.5,
            "kept": stats.kept,
            "numel": stats.numel,
            "tensor_gamma": stats.tensor_gamma,
        }
        writer.add_file("taskvec.json", json.dumps(meta, indent=1))
        writer.commit()
    return SourceVector(key, out, meta)


def _reusable(out: Path, key: str, al: Alignment) -> SourceVector | None:
    """The finished cache entry at `out`, or None after moving a damaged one out of the way (a
    missing or cut shard, an unreadable taskvec.json, a tensor missing): the entry is derived
    data, so it is rebuilt — said once, in one line."""
    try:
        meta = json.loads((out / "taskvec.json").read_text())
        vector = SourceVector(key, out, meta)
        missing = [n for n in al.merged if n not in vector.weights]
        if missing:
            raise DotsError(f"it lacks tensor {missing[0]}")
    except (DotsError, OSError, ValueError) as exc:
        log.warning("task-vector cache entry %s is damaged (%s); rebuilding it", out, exc)
        trash = out.with_name(f".{out.name}.damaged-{os.getpid()}")
        out.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
        return None
    return vector


def build_task_vectors(
    base: Checkpoint,
    sources: Mapping[str, Checkpoint],
    cfg: SparsifyConfig = SparsifyConfig(),
    cache_root: str | os.PathLike | None = None,
    alignment: Alignment | None = None,
) -> TaskVectors:
    """τ̃ for every source, from the cache when its inputs and options are unchanged."""
    al = alignment or align(base, sources)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    entries: dict[str, SourceVector] = {}
    for key, ckpt in sources.items():
        out = root / _cache_key(base, ckpt, cfg)
        meta_file = out / "taskvec.json"
        with run_once_lock(root / f".{out.name}.lock"):  # concurrent workers build an entry once
            cached = _reusable(out, key, al) if meta_file.exists() else None
            if cached is not None:
                log.info("source %s: reusing cached task vector %s", key, out)
                entries[key] = cached
            else:
                entries[key] = _build_one(al, key, cfg, out)
    return TaskVectors(base.path, entries, al.merged, al.copied)
