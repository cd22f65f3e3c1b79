"""Task vectors τ_i = θ_i − θ0, sparsified and norm-rescaled, cached on disk (SPEC §1).

DoTS Eq. 3: τ̃ = γ·(τ⊙M) with M the top-`density` entries of |τ| and
γ = ‖τ‖₂ / (‖τ⊙M‖₂ + 1e-8). The cache stores τ⊙M (float32 safetensors) and the scale γ
(one per source for `rescale: global`, one per tensor for `rescale: tensor`) in
`taskvec.json`; `TaskVectors.get` applies it. This way a per-tensor top-k needs a single
streaming pass even with a global γ. `scope: global` first finds the exact global k-th
largest |τ| with a two-level radix histogram over float bit patterns (bounded memory),
then writes. Each source's entry is keyed by a hash of (base, source, options), so a
source reused with another partner, or by another run, is not recomputed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import torch

from dots.align import Alignment, align
from dots.checkpoint import Checkpoint, CheckpointWriter, TensorInfo, all_finite
from dots.errors import DotsError
from dots.parallel import run_once_lock
from dots.progress import progress_bar
from dots.topk import global_kth_largest, mask_largest, topk_mask

log = logging.getLogger(__name__)

CACHE_VERSION = 1
EXTRA_SUFFIX = ".__extra_rows__"
SCOPES = ("tensor", "global")
RESCALES = ("global", "tensor", "none")


@dataclass(frozen=True)
class SparsifyConfig:
    """Options of SPEC §1. density 1.0 + rescale none = the dense task vector."""

    density: float = 0.3
    scope: str = "tensor"
    rescale: str = "global"

    def __post_init__(self) -> None:
        if not (0.0 < float(self.density) <= 1.0):
            raise DotsError(f"density must be in (0, 1], got {self.density}")
        if self.scope not in SCOPES:
            raise DotsError(f"sparsify scope must be one of {SCOPES}, got {self.scope!r}")
        if self.rescale not in RESCALES:
            raise DotsError(f"sparsify rescale must be one of {RESCALES}, got {self.rescale!r}")

    @property
    def dense(self) -> bool:
        return float(self.density) >= 1.0


def default_cache_root() -> Path:
    return Path(os.environ.get("DOTS_CACHE", Path(os.environ.get("DOTS_OUTPUTS", "outputs")) / "cache")) / "taskvec"


def fingerprint(ckpt: Checkpoint) -> dict:
    """Identity of a checkpoint's weights without hashing their bytes: path, sizes, mtimes."""
    files = sorted({p for p in ckpt.path.glob("*.safetensors")})
    return {"path": str(ckpt.path.resolve()), "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]}


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
            "base": str(self.base_path), "names": self.names, "copied": self.copied,
            "sources": {k: str(v.path) for k, v in self.entries.items()},
        }

    @classmethod
    def from_spec(cls, spec: Mapping) -> "TaskVectors":
        entries = {}
        for key, path in spec["sources"].items():
            meta = json.loads((Path(path) / "taskvec.json").read_text())
            entries[key] = SourceVector(key, Path(path), meta)
        return cls(Path(spec["base"]), entries, spec["names"], spec["copied"])

    def stats(self) -> dict[str, dict]:
        return {k: {f: v.meta[f] for f in ("norm", "kept_norm", "gamma", "kept", "numel")} for k, v in self.entries.items()}


def _cache_key(base: Checkpoint, source: Checkpoint, cfg: SparsifyConfig) -> str:
    payload = json.dumps(
        {"v": CACHE_VERSION, "base": fingerprint(base), "source": fingerprint(source), "cfg": asdict(cfg)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def _task_vector(al: Alignment, key: str, name: str) -> torch.Tensor:
    tau = al.source_tensor(key, name).float() - al.base.get(name).float()
    if not all_finite(tau):
        raise DotsError(f"source {key} has NaN/Inf in {name}")
    return tau


def _build_one(al: Alignment, key: str, cfg: SparsifyConfig, out: Path) -> SourceVector:
    names = al.merged
    stream = lambda: (_task_vector(al, key, n) for n in names)  # noqa: E731
    threshold: tuple[float, int] | None = None
    total = sum(al.base.info(n).numel for n in names)
    k_global = round(float(cfg.density) * total)
    if cfg.scope == "global" and not cfg.dense:
        log.info("source %s: finding the global top-%d threshold (two passes)", key, k_global)
        threshold = global_kth_largest(stream, k_global)
    plan = {n: TensorInfo(al.base.info(n).shape, torch.float32) for n in names}
    for name in al.extra_rows:
        if al.extra_rows[name] == key:
            rows = al.extra_rows_tensor(name)
            assert rows is not None
            plan[name + EXTRA_SUFFIX] = TensorInfo(tuple(rows.shape), al.base.info(name).dtype)
    norm_sq = kept_sq = 0.0
    kept = 0
    ties_left = threshold[1] if threshold else 0
    tensor_gamma: dict[str, float] = {}
    with CheckpointWriter(out, plan, max_shard_bytes=4 * 2**30, weights_name="tau") as writer:
        for name in progress_bar(names, f"τ̃ {key}"):
            tau = _task_vector(al, key, name)
            mag = tau.abs()
            if cfg.dense:
                sparse = tau
            elif threshold is None:
                sparse = tau * topk_mask(mag, round(float(cfg.density) * tau.numel()))
            else:
                mask, ties_left = mask_largest(mag.reshape(-1), threshold[0], ties_left, absolute=False)
                sparse = tau * mask.view(tau.shape)
            t_norm = float(tau.double().pow(2).sum())
            t_kept = float(sparse.double().pow(2).sum())
            norm_sq += t_norm
            kept_sq += t_kept
            kept += int((sparse != 0).sum())
            tensor_gamma[name] = 1.0 if cfg.rescale != "tensor" else (t_norm ** 0.5) / (t_kept ** 0.5 + 1e-8)
            writer.write(name, sparse)
            del tau, mag, sparse
        for name in plan:
            if name.endswith(EXTRA_SUFFIX):
                writer.write(name, al.extra_rows_tensor(name[: -len(EXTRA_SUFFIX)]))
        gamma = (norm_sq ** 0.5) / (kept_sq ** 0.5 + 1e-8) if cfg.rescale == "global" else 1.0
        meta = {
            "version": CACHE_VERSION, "source_key": key, "source": al.sources[key].source,
            "base": al.base.source, **asdict(cfg), "gamma": gamma, "norm": norm_sq ** 0.5,
            "kept_norm": kept_sq ** 0.5, "kept": kept, "numel": total, "tensor_gamma": tensor_gamma,
        }
        writer.add_file("taskvec.json", json.dumps(meta, indent=1))
        writer.commit()
    return SourceVector(key, out, meta)


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
            if meta_file.exists():
                log.info("source %s: reusing cached task vector %s", key, out)
                entries[key] = SourceVector(key, out, json.loads(meta_file.read_text()))
            else:
                entries[key] = _build_one(al, key, cfg, out)
    return TaskVectors(base.path, entries, al.merged, al.copied)
