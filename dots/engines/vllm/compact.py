"""What a vLLM worker reads to hold τ̃ in its parameters' layout (`dots.engines.vllm.resident`):
the checkpoints its own loader places (θ0, or θ0 with a source's kept entries), and one
parameter's compact τ̃ found where a source's loaded copy differs from θ0's. No vLLM here."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import TaskVectors
from dots.vectors.compact import CompactTensor, form_bytes, position_dtype

__all__ = ["param_compact"]

GATHER_BLOCK = 1 << 24  # entries of a parameter compared and gathered at a time at set-up


def checkpoint_stream(tv: TaskVectors, base: Checkpoint, source: str | None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the base as the synthesis yields it at λ = 0 (θ0, a source's added
    vocabulary rows appended) — with source i's values at its kept entries when `source`."""
    merged = set(tv.names)
    for name in base.names:
        tensor = base.get(name)
        if name in merged:
            if source is not None:
                tensor = tv.compact(source, name).kept_in(tensor, in_place=True)  # read fresh: ours
            extra = tv.extra_rows(name)
            if extra is not None:
                tensor = torch.cat([tensor, extra.to(tensor.dtype)], dim=0)
        yield name, tensor


def param_compact(
    theta0: torch.Tensor, theta: torch.Tensor, gamma: float, dtype: torch.dtype
) -> tuple[CompactTensor | None, int]:
    """Source i's τ̃ of one parameter in compact form: where its loaded copy `theta` differs from
    θ0's (`theta0`), θ_i's values there in `dtype` (None when they never differ), and how many
    entries that is."""
    a, b = theta0.reshape(-1), theta.reshape(-1)
    keep = a != b  # the kept entries: θ_i ≠ θ0 at each, θ0 bit for bit elsewhere
    flags = keep.numpy() if keep.device.type == "cpu" else None  # CPU: numpy counts and finds them
    kept = int(np.count_nonzero(flags)) if flags is not None else int(keep.sum())  # 5-15× torch's mask ops
    if kept == 0:
        return None, 0
    n = a.numel()
    sizes = form_bytes(n, kept, torch.empty((), dtype=dtype).element_size())
    form = min(sizes, key=lambda f: sizes[f])
    shape = tuple(theta0.shape)
    if form == "full":  # τ = θ_i − θ0 is +0.0 wherever they agree, as a scattered zero is
        return CompactTensor(shape, "full", b.to(dtype, copy=True), gamma=gamma), kept
    if form == "bitmask":  # gathered a block at a time: positions of the whole tensor would be
        step = GATHER_BLOCK  # int64 of all it keeps (1.3 GB for a 7B embedding at d = 0.3)

        def gathered(i: int) -> torch.Tensor:  # θ_i's kept values in [i, i + step)
            if flags is None:
                return b[i : i + step][keep[i : i + step]].to(dtype)
            at = torch.from_numpy(np.flatnonzero(flags[i : i + step]))
            return torch.index_select(b[i : i + step], 0, at).to(dtype)

        values = torch.cat([gathered(i) for i in range(0, n, step)])
        bits = flags if flags is not None else keep.cpu().numpy()
        where = torch.from_numpy(np.packbits(bits, bitorder="little")).to(b.device)
    else:
        positions = torch.from_numpy(np.flatnonzero(flags)) if flags is not None else torch.nonzero(keep).reshape(-1)
        values = b[positions].to(dtype)
        where = positions.to(position_dtype(n))
    return CompactTensor(shape, form, values, where=where, gamma=gamma), kept
