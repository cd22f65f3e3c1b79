"""PyTorch `.bin` checkpoints → safetensors, shard by shard."""

from __future__ import annotations

import logging
import os
import re
import zipfile
from pathlib import Path
from typing import Mapping

import torch

from dots.errors import DotsError, first_line
from dots.io.checkpoint import INDEX_NAMES, WEIGHT_SUFFIXES
from dots.io.destination import RECORD, claim
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter

__all__ = ["convert_bin_to_safetensors", "load_bin"]

log = logging.getLogger(__name__)
# torch's reason follows the marker on its line, or (torch 2.13) after a blank line
REFUSED = re.compile(r"WeightsUnpickler error:\s*(?:Unsupported global: GLOBAL ([\w.]+)|([^\n]{1,160}))")


def load_bin(shard: Path) -> Mapping[str, torch.Tensor]:
    """The tensors of one `.bin` file, read with `weights_only=True` (no code of the pickle runs):
    mapped when it is a zip archive (torch ≥ 1.6), read whole when it is the legacy format, which
    torch cannot map. A pickle torch refuses, a file that is no checkpoint, or one holding more
    than tensors (a training checkpoint) is one DotsError line."""
    legacy = not zipfile.is_zipfile(shard)
    if legacy:
        with open(shard, "rb") as head:
            if head.read(1) != b"\x80":  # torch.save's legacy files are pickles of protocol 2: PROTO first
                raise DotsError(f"cannot read {shard} as a PyTorch checkpoint: neither a zip archive nor a pickle")
    try:
        state = torch.load(shard, map_location="cpu", mmap=not legacy, weights_only=True)
    except Exception as exc:  # UnpicklingError, RuntimeError, EOFError, ...: torch's messages run to 20 lines
        refused = REFUSED.search(str(exc)) if "Weights only load failed" in str(exc) else None
        if refused is not None:
            what = f"it names {refused.group(1)}" if refused.group(1) else refused.group(2).rstrip(". ")
            raise DotsError(
                f"{shard}: torch refuses to load its pickle with weights_only=True ({what}, which a file of "
                "tensors does not need); dots runs no code from a pickle: load it with "
                "torch.load(weights_only=False) only if you trust its origin, and save its tensors"
            ) from None
        raise DotsError(f"cannot read {shard} as a PyTorch checkpoint: {first_line(exc)[:300]}") from None
    if not isinstance(state, Mapping):
        raise DotsError(f"{shard} holds a {type(state).__name__}, not a mapping of tensor names to tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise DotsError(
                f"{shard}: entry {str(key)[:80]!r} is a {type(value).__name__}, not a tensor (a training "
                "checkpoint? save the model's state_dict alone)"
            )
    if legacy:
        log.info("%s is in PyTorch's legacy (pre-1.6) format: read whole, it cannot be mapped", shard)
    return state


def convert_bin_to_safetensors(src: str | os.PathLike, out: str | os.PathLike, overwrite: bool = False) -> Path:
    """Convert a PyTorch .bin checkpoint directory to safetensors, shard by shard, into `out`:
    a new or empty directory, or a previous conversion with `overwrite` (`dots.io.destination`).
    Every shard is read (`load_bin`) before anything is written."""
    src = Path(src)
    shards = sorted(src.glob("pytorch_model*.bin")) or sorted(src.glob("*.bin"))
    if not shards:
        raise DotsError(f"no .bin weights in {src}")
    dest = claim(out, "convert", overwrite, inputs=[src])
    plan: dict[str, TensorInfo] = {}
    owner: dict[str, Path] = {}
    for shard in shards:  # first pass: shapes only (mmap keeps memory low)
        sd = load_bin(shard)
        for name, tensor in sd.items():
            if name in owner:
                raise DotsError(f"{src}: tensor {name!r} is defined in both {owner[name].name} and {shard.name}")
            owner[name], plan[name] = shard, TensorInfo(tuple(tensor.shape), tensor.dtype)
        del sd
    with CheckpointWriter(dest, plan) as writer:
        for shard in shards:
            sd = load_bin(shard)
            writer.write_all(sd.items())
            del sd
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name not in (*INDEX_NAMES, RECORD):
                writer.copy_file(f)
        return writer.commit()
