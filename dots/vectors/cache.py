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
rebuilt, never read.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from dots.errors import DotsError
from dots.io.align import Alignment, align
from dots.io.checkpoint import Checkpoint
from dots.io.destination import claim, discard, input_paths
from dots.io.inputs import taskvec_dir
from dots.io.safetensors import AppendedFile, dtype_size
from dots.io.writer import check_free_space, disk_write_error
from dots.keys import stable_hash
from dots.runtime.locks import run_once_lock
from dots.vectors.compact import NEGZERO, VALUES, WHERE, CompactTensor, encode
from dots.vectors.sparsify import SparseStats, SparsifyConfig, sparsify_source

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 1: dense float32 τ⊙M; 2: compact (θ_i's values at the mask)
EXTRA_SUFFIX = ".__extra_rows__"
WEIGHTS_FILE = "tau.safetensors"


def default_cache_root() -> Path:
    """Where task-vector entries live: <cache root>/taskvec (`dots.io.inputs.taskvec_dir`)."""
    return taskvec_dir(None)


# --- reading ----------------------------------------------------------------------------


@dataclass
class SourceVector:
    """One source's cache entry: compact τ̃ per tensor and its scales."""

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

    def compact(self, name: str) -> CompactTensor:
        """τ̃ of tensor `name` as stored (CPU tensors read into private memory)."""
        info = self.meta["tensors"][name]
        form = info["form"]
        weights = self.weights
        return CompactTensor(
            shape=tuple(info["shape"]),
            form=form,
            values=weights.get(name + VALUES),
            where=weights.get(name + WHERE) if form != "full" else None,
            negzero=weights.get(name + NEGZERO) if name + NEGZERO in weights else None,
            gamma=self.scale(name),
        )

    def get(self, name: str, theta0: torch.Tensor) -> torch.Tensor:
        """τ̃ of tensor `name` in float32, rebuilt against θ0 (`theta0`, the base's tensor)."""
        return self.compact(name).dense(theta0)

    def tau_bytes(self, names: list[str]) -> int:
        """Bytes of the compact τ̃ of tensors `names` (what a resident copy holds of them)."""
        weights = self.weights
        parts = [n + s for n in names for s in (VALUES, WHERE, NEGZERO)]
        return sum(weights.info(p).nbytes for p in parts if p in weights)

    @property
    def nbytes(self) -> int:
        """Bytes of the entry's tensors on disk (compact τ̃ and any added vocabulary rows)."""
        return sum(f.stat().st_size for f in self.path.glob("*.safetensors"))


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


def _cache_key(base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig, version: int = CACHE_VERSION) -> str:
    return stable_hash({"v": version, "base": base.fingerprint(), "source": source.fingerprint(), "cfg": cfg.key()}, 20)


def _note_older_entries(root: Path, base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig) -> None:
    """Log the entries earlier cache versions left for these inputs: never read again, they
    hold disk (version 1: 4 bytes per parameter), and an older dots may still use them."""
    for version in range(1, CACHE_VERSION):
        old = root / _cache_key(base, source, cfg, version)
        if old.is_dir():
            size = sum(f.stat().st_size for f in old.iterdir() if f.is_file())
            log.warning(
                "an entry of task-vector cache version %d remains at %s (%.2f GB): delete it", version, old, size / 1e9
            )


def _build_one(al: Alignment, key: str, cfg: SparsifyConfig, out: Path) -> SourceVector:
    """Sparsify source `key` (`sparsify_source`) into a new cache entry at `out`: each τ⊙M is
    encoded (`dots.vectors.compact.encode`) against θ_i and θ0 and appended to one
    safetensors file; the entry appears at `out` only when complete (atomic rename)."""
    extras = [name for name, giver in al.extra_rows.items() if giver == key]
    entry_names = [n + s for n in al.merged for s in (VALUES, WHERE, NEGZERO)] + [n + EXTRA_SUFFIX for n in extras]
    out.parent.mkdir(parents=True, exist_ok=True)
    check_free_space(out, _entry_bytes_bound(al, key, cfg, extras))
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        stats = SparseStats()
        tensors: dict[str, dict] = {}
        with AppendedFile(tmp / WEIGHTS_FILE, entry_names) as writer:
            for name, sparse in sparsify_source(al, key, cfg, stats):
                form, parts = encode(sparse, al.source_tensor(key, name), al.base.get(name))
                for suffix, tensor in parts.items():
                    writer.add(name + suffix, tensor)
                tensors[name] = {"form": form, "shape": list(sparse.shape), "stored": parts[VALUES].numel()}
                del sparse, parts
            for name in extras:
                rows = al.extra_rows_tensor(name)
                assert rows is not None  # listed above only where it is
                writer.add(name + EXTRA_SUFFIX, rows.to(al.base.info(name).dtype))
        meta = {
            "version": CACHE_VERSION,
            "format": "compact",
            "source_key": key,
            "source": al.sources[key].source,
            "base": al.base.source,
            **cfg.key(),
            "gamma": stats.gamma(cfg.rescale),
            "norm": stats.norm_sq**0.5,
            "kept_norm": stats.kept_sq**0.5,
            "kept": stats.kept,
            "numel": stats.numel,
            "tensor_gamma": stats.tensor_gamma,
            "tensors": tensors,
        }
        (tmp / "taskvec.json").write_text(json.dumps(meta, indent=1))
        if out.exists():  # an unfinished entry at this path: replaced, never read
            discard(out, _entry_file)
        tmp.rename(out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise disk_write_error(out, exc) from exc
        raise
    return SourceVector(key, out, meta)


def _entry_bytes_bound(al: Alignment, key: str, cfg: SparsifyConfig, extras: list[str]) -> int:
    """About the most bytes an entry of source `key` takes (checked before building it): per
    tensor a bitmask (n/8; the position form is used only where it is smaller) and the kept
    values in the source's dtype, d·n of them (the global scope keeps d·N in all), plus the
    added vocabulary rows. The small negative-zero lists are left out."""
    source = al.sources[key]
    total = 0
    for name in al.merged:
        numel, kept_size = al.base.info(name).numel, dtype_size(source.info(al.source_name(key, name)).dtype)
        total += -(-numel // 8) + int(cfg.density * numel + 1) * kept_size
    for name in extras:
        base = al.base.info(name)
        total += (source.info(al.source_name(key, name)).numel - base.numel) * dtype_size(base.dtype)
    return total


def _entry_file(name: str) -> bool:
    return name == "taskvec.json" or name.endswith((".safetensors", ".safetensors.index.json"))


def _reusable(out: Path, key: str, al: Alignment) -> SourceVector | None:
    """The finished cache entry at `out`, or None after removing a damaged one's files (a
    missing or cut shard, an unreadable taskvec.json, a tensor missing): the entry is derived
    data, so it is rebuilt — said once, in one line."""
    try:
        meta = json.loads((out / "taskvec.json").read_text())
        if meta.get("version") != CACHE_VERSION:
            raise DotsError(f"written by cache version {meta.get('version')}, this dots reads {CACHE_VERSION}")
        vector = SourceVector(key, out, meta)
        stored = set(vector.weights.names)
        missing = [n for n in al.merged if n not in vector.meta["tensors"] or n + VALUES not in stored]
        if missing:
            raise DotsError(f"it lacks tensor {missing[0]}")
    except (DotsError, OSError, ValueError) as exc:
        log.warning("task-vector cache entry %s is damaged (%s); rebuilding it", out, exc)
        discard(out, _entry_file)
        return None
    return vector


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
        out = root / _cache_key(base, ckpt, cfg)
        meta_file = out / "taskvec.json"
        with run_once_lock(root / f".{out.name}.lock"):  # concurrent workers build an entry once
            cached = _reusable(out, key, al) if meta_file.exists() else None
            if cached is not None:
                log.info("source %s: reusing cached task vector %s", key, out)
                entries[key] = cached
            else:
                entries[key] = _build_one(al, key, cfg, out)
                _note_older_entries(root, base, ckpt, cfg)
    return TaskVectors(base.path, entries, al.merged, al.copied)
