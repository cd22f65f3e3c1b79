"""PyTorch `.bin` checkpoints → safetensors, shard by shard."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from dots.errors import DotsError
from dots.io.checkpoint import INDEX_NAMES, WEIGHT_SUFFIXES
from dots.io.destination import RECORD, claim
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter

__all__ = ["convert_bin_to_safetensors"]


def convert_bin_to_safetensors(src: str | os.PathLike, out: str | os.PathLike, overwrite: bool = False) -> Path:
    """Convert a PyTorch .bin checkpoint directory to safetensors, shard by shard, into `out`:
    a new or empty directory, or a previous conversion with `overwrite` (`dots.io.destination`)."""
    src = Path(src)
    shards = sorted(src.glob("pytorch_model*.bin")) or sorted(src.glob("*.bin"))
    if not shards:
        raise DotsError(f"no .bin weights in {src}")
    dest = claim(out, "convert", overwrite, inputs=[src])
    plan: dict[str, TensorInfo] = {}
    for shard in shards:  # first pass: shapes only (mmap keeps memory low)
        sd = torch.load(shard, map_location="cpu", mmap=True, weights_only=True)
        plan.update({k: TensorInfo(tuple(v.shape), v.dtype) for k, v in sd.items()})
        del sd
    with CheckpointWriter(dest, plan) as writer:
        for shard in shards:
            sd = torch.load(shard, map_location="cpu", mmap=True, weights_only=True)
            writer.write_all(sd.items())
            del sd
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name not in (*INDEX_NAMES, RECORD):
                writer.copy_file(f)
        return writer.commit()
