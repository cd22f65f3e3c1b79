"""One source's entry of the τ̃ cache (`dots.vectors.cache`): its files, reading it, writing it.

An entry is a folder: `taskvec.json` (cache version, the source and base, the sparsify options,
the scale γ — one per source or per tensor — and each tensor's compact form) and one
safetensors file holding, per merged tensor, θ_i's values where M_i keeps an entry and where
that is (`dots.vectors.compact`), and any vocabulary rows the source added. It is written into
a temporary folder and renamed into place when complete, so a reader never sees half an entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from dots.errors import DotsError
from dots.io.align import Alignment
from dots.io.checkpoint import Checkpoint
from dots.io.commit import claim_temp, install_dir, release
from dots.io.contents import discard
from dots.io.safetensors import AppendedFile, dtype_size
from dots.io.writer import check_free_space, disk_write_error
from dots.vectors.compact import NEGZERO, VALUES, WHERE, CompactTensor, encode
from dots.vectors.sparsify import SparseStats, SparsifyConfig, sparsify_source

__all__ = ["CACHE_VERSION"]

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 1: dense float32 τ⊙M; 2: compact (θ_i's values at the mask)
EXTRA_SUFFIX = ".__extra_rows__"
WEIGHTS_FILE = "tau.safetensors"


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


def write_entry(al: Alignment, key: str, cfg: SparsifyConfig, out: Path) -> SourceVector:
    """Sparsify source `key` (`sparsify_source`) into a new cache entry at `out`: each τ⊙M is
    encoded (`dots.vectors.compact.encode`) against θ_i and θ0 and appended to one
    safetensors file; the entry appears at `out` only when complete (atomic rename)."""
    extras = [name for name, giver in al.extra_rows.items() if giver == key]
    entry_names = [n + s for n in al.merged for s in (VALUES, WHERE, NEGZERO)] + [n + EXTRA_SUFFIX for n in extras]
    out.parent.mkdir(parents=True, exist_ok=True)
    check_free_space(out, entry_bytes_bound(al, key, cfg, extras))
    tmp = claim_temp(out)  # locked while this process lives (a dead one's is removed: dots.io.commit)
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
            "digests": {WEIGHTS_FILE: file_digest(tmp / WEIGHTS_FILE)},
        }
        (tmp / "taskvec.json").write_text(json.dumps(meta, indent=1))
        if out.exists():  # an unfinished entry at this path: replaced, never read
            discard(out, is_entry_file)
        install_dir(tmp, out, lambda old: None)  # synced, then renamed (`out` is new here)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise disk_write_error(out, exc) from exc
        raise
    finally:
        release(tmp)
    return SourceVector(key, out, meta)


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 16 MiB blocks (what an entry is checked against)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            h.update(block)
    return "sha256:" + h.hexdigest()


def check_digests(folder: Path, digests: dict) -> None:
    """A DotsError naming the first file of `folder` whose bytes are not those its digest was taken
    of (a scrambled entry: same size, other bytes). Entries of an older dots carry none: not checked."""
    for name, known in sorted(digests.items()):
        if file_digest(folder / name) != known:
            raise DotsError(f"the bytes of {name} do not match their digest")


def entry_bytes_bound(al: Alignment, key: str, cfg: SparsifyConfig, extras: list[str]) -> int:
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


def is_entry_file(name: str) -> bool:
    """A file an entry is made of (what replacing a damaged entry may delete)."""
    return name == "taskvec.json" or name.endswith((".safetensors", ".safetensors.index.json"))


def reusable_entry(out: Path, key: str, al: Alignment) -> SourceVector | None:
    """The finished cache entry at `out`, or None after removing a damaged one's files (a
    missing or cut shard, bytes that do not match their digest, an unreadable taskvec.json, a tensor
    missing): the entry is derived
    data, so it is rebuilt — said once, in one line."""
    try:
        meta = json.loads((out / "taskvec.json").read_text())
        if meta.get("version") != CACHE_VERSION:
            raise DotsError(f"written by cache version {meta.get('version')}, this dots reads {CACHE_VERSION}")
        check_digests(out, meta.get("digests") or {})
        vector = SourceVector(key, out, meta)
        stored = set(vector.weights.names)
        missing = [n for n in al.merged if n not in vector.meta["tensors"] or n + VALUES not in stored]
        if missing:
            raise DotsError(f"it lacks tensor {missing[0]}")
    except (DotsError, OSError, ValueError) as exc:
        log.warning("task-vector cache entry %s is damaged (%s); rebuilding it", out, exc)
        discard(out, is_entry_file)
        return None
    return vector
