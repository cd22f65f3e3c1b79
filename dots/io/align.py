"""Which tensors of a base and its sources take part in a merge (docs/method.md, notation).

Only floating tensors whose name and shape exist in the base and in every source are
merged; every other base tensor is copied. A shape mismatch is an error unless it is
only extra rows of an embedding / lm_head (tokens added by a source): those rows come
from the source that has the most of them, and this is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping

import torch

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo

__all__ = ["Alignment", "align", "config_differences"]

log = logging.getLogger(__name__)

EMBEDDING_HINTS = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_in", "embed_out")
TIED_EMBEDDING = "model.embed_tokens.weight"


def is_vocab_tensor(name: str) -> bool:
    return any(h in name for h in EMBEDDING_HINTS)


@dataclass
class Alignment:
    base: Checkpoint
    sources: dict[str, Checkpoint]
    merged: list[str]
    copied: list[str]
    out_plan: dict[str, TensorInfo]
    extra_rows: dict[str, str] = field(default_factory=dict)  # name -> source key giving extra rows
    renames: dict[tuple[str, str], str] = field(default_factory=dict)

    def revisions(self) -> dict[str, str | None]:
        """The commit each checkpoint was read at ("base" and each source key; None: a local
        directory), for the model card."""
        return {"base": self.base.revision, **{key: ckpt.revision for key, ckpt in self.sources.items()}}

    def source_name(self, key: str, name: str) -> str:
        """The tensor name to read in source `key` for base tensor `name`."""
        return self.renames.get((key, name), name)

    def source_tensor(self, key: str, name: str) -> torch.Tensor:
        """Source tensor restricted to the base's rows (extra vocab rows cut off)."""
        tensor = self.sources[key].get(self.source_name(key, name))
        rows = self.base.info(name).shape[0] if tensor.dim() else 0
        if name in self.extra_rows and tensor.shape[0] > rows:
            tensor = tensor[:rows]
        return tensor

    def extra_rows_tensor(self, name: str) -> torch.Tensor | None:
        """Rows beyond the base's vocabulary, from the source that added them."""
        key = self.extra_rows.get(name)
        if key is None:
            return None
        tensor = self.sources[key].get(self.source_name(key, name))
        return tensor[self.base.info(name).shape[0] :]

    def tokenizer_source(self) -> Checkpoint:
        """Where a merged model's tokenizer and generation files come from: the source that
        added vocabulary rows (the one giving the embedding's, when several did), else the
        base — the base's tokenizer cannot decode added tokens."""
        if not self.extra_rows:
            return self.base
        key = self.extra_rows.get(TIED_EMBEDDING) or next(iter(self.extra_rows.values()))
        return self.sources[key]

    def output_config(self, config_from: str = "base") -> dict:
        """The config.json of the output: from the base or a named source, vocab adjusted."""
        ckpt = self.base if config_from == "base" else self.sources.get(config_from)
        if ckpt is None:
            raise DotsError(f"config_from={config_from!r} is neither 'base' nor a source ({', '.join(self.sources)})")
        config = dict(ckpt.config)
        embed = self.out_plan.get(TIED_EMBEDDING)
        if embed is not None and "vocab_size" in config:
            config["vocab_size"] = embed.shape[0]
        return config


def config_differences(base: Checkpoint, sources: Mapping[str, Checkpoint]) -> dict[str, dict[str, object]]:
    """Config fields (rope_theta, max_position_embeddings, ...) that differ from the base's."""
    ignore = {"_name_or_path", "torch_dtype", "dtype", "transformers_version", "architectures", "use_cache"}
    ref = base.config
    diffs: dict[str, dict[str, object]] = {}
    for key, ckpt in sources.items():
        cfg = ckpt.config
        for field_name in sorted(set(ref) | set(cfg)):
            if field_name in ignore or ref.get(field_name) == cfg.get(field_name):
                continue
            diffs.setdefault(field_name, {"base": ref.get(field_name)})[key] = cfg.get(field_name)
    return diffs


def align(base: Checkpoint, sources: Mapping[str, Checkpoint]) -> Alignment:
    """Check that the sources are fine-tunes of the base and plan what gets merged."""
    if not sources:
        raise DotsError("no source checkpoints given")
    for key, ckpt in sources.items():
        if ckpt.architecture != base.architecture:
            raise DotsError(f"architectures differ: base is {base.architecture}, source {key} is {ckpt.architecture}")
    merged: list[str] = []
    copied: list[str] = []
    plan: dict[str, TensorInfo] = {}
    extra: dict[str, str] = {}
    renames: dict[tuple[str, str], str] = {}
    for key, ckpt in sources.items():
        missing = [n for n in base.names if n not in ckpt]
        for name in list(missing):
            if name == "lm_head.weight" and ckpt.tie_word_embeddings and TIED_EMBEDDING in ckpt:
                renames[(key, name)] = TIED_EMBEDDING
                missing.remove(name)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise DotsError(f"source {key} ({ckpt.source}) lacks tensor {missing[0]}{more} that the base has")
        ignored = [n for n in ckpt.names if n not in base]
        if ignored:
            log.warning("source %s has %d tensors the base lacks (ignored), e.g. %s", key, len(ignored), ignored[0])
    for name in base.names:
        info = base.info(name)
        rows = info.shape[0] if info.shape else 0
        floating = info.dtype.is_floating_point
        out_shape = info.shape
        for key, ckpt in sources.items():
            sinfo = ckpt.info(renames.get((key, name), name))
            floating = floating and sinfo.dtype.is_floating_point
            if sinfo.shape == info.shape:
                continue
            only_rows = (
                is_vocab_tensor(name)
                and len(sinfo.shape) == len(info.shape) >= 1
                and sinfo.shape[1:] == info.shape[1:]
                and sinfo.shape[0] > rows
            )
            if not only_rows:
                raise DotsError(f"shapes differ for {name}: base {list(info.shape)}, source {key} {list(sinfo.shape)}")
            if sinfo.shape[0] > out_shape[0]:
                out_shape = sinfo.shape
                extra[name] = key
        if name in extra:
            log.warning("%s: %d extra rows (added tokens) taken from source %s", name, out_shape[0] - rows, extra[name])
        (merged if floating else copied).append(name)
        plan[name] = TensorInfo(tuple(out_shape), info.dtype)
    if not merged:
        raise DotsError("no floating tensor is shared by the base and every source")
    return Alignment(base, dict(sources), merged, copied, plan, extra, renames)
