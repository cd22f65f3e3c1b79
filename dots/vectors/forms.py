"""Resident forms of τ̃: how a swap holds each source's sparsified task vector in memory.

The τ̃ cache stores the compact form (`dots.vectors.compact`): where M_i keeps an entry and
θ_i's value there, 0.725 bytes per parameter for bf16 at density 0.3, rebuilt against θ0 at
every swap. Where memory allows, a swap is faster from a form that needs less work per block:

- `bitmask`: the compact form as stored (bitmask, positions or θ_i whole): decoded every swap;
- `index`: the compact form with each bitmask replaced by the kept positions (int32; the
  cache's own `index` form): 4 + itemsize bytes per kept entry, no bitmask to decode;
- `sparse`: τ̃'s float32 values (γ applied) at int32 positions (int64 past 2^31 entries),
  scattered into a zeroed block: 8 bytes per kept entry, no decoding, no θ0 gather;
- `dense`: τ̃ itself in float32, 4 bytes per parameter: a swap only reads it.

Every form is built from the compact one block by block with the compact form's own
arithmetic (`TauBlocks.fill`: float32(θ_i) − float32(θ0), γ, zeros, the stored −0.0s), and
hands the synthesis the very float32 block that form rebuilds — same values, same signs of
zero — so θ0 + Σ λ_i τ̃_i (`dots.vectors.synth.combine_into`) has the same bits whichever
form is held. Speed: dense > sparse > index > bitmask (measured on an H200 and on CPU, streaming
and fused, `benchmarks/swap/fused.py`); the memory plan (`dots.plan`) picks the fastest that
fits beside the engine (`engine.resident_form`, docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

import torch

from dots.errors import DotsError
from dots.vectors.compact import CompactTensor, estimate_bytes, position_dtype

__all__ = ["BY_SPEED", "DenseTau", "ResidentTau", "check_resident_form", "form_estimate", "to_form"]

RESIDENT_FORMS = ("auto", "dense", "sparse", "index", "bitmask")
BY_SPEED = ("dense", "sparse", "index", "bitmask")  # fastest first
CONVERT_BLOCK = 1 << 22  # entries rebuilt at a time while a form is built (16 MiB of float32)


def check_resident_form(value: str) -> str:
    """`engine.resident_form`: auto (the memory plan picks the fastest that fits), or one of
    dense, sparse, index, bitmask held whatever it costs (checked by the plan: too large → one line)."""
    if value not in RESIDENT_FORMS:
        raise DotsError(f"engine.resident_form must be one of {', '.join(RESIDENT_FORMS)}, got {value!r}")
    return value


def form_estimate(numel: int, density: float, itemsize: int, form: str) -> int:
    """Bytes of one tensor's τ̃ of one source held in `form`, before the cache exists: dense
    4·n; sparse (4 + position size)·round(d·n) (θ_i whole at density 1: every entry); index
    (itemsize + position size)·round(d·n) (θ_i whole at density 1: n·itemsize); bitmask the
    compact estimate (`estimate_bytes`)."""
    if form == "dense":
        return 4 * numel
    position = torch.empty((), dtype=position_dtype(numel)).element_size()
    if form == "sparse":
        kept = numel if density >= 1.0 else round(density * numel)
        return kept * (4 + position)
    if form == "index":
        return numel * itemsize if density >= 1.0 else round(density * numel) * (itemsize + position)
    return estimate_bytes(numel, density, itemsize)


@dataclass
class DenseTau:
    """τ̃ of one tensor of one source as one flat float32 tensor (the compact form's bits)."""

    shape: tuple[int, ...]
    data: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def to(self, device: torch.device | str) -> DenseTau:
        return replace(self, data=self.data.to(device))

    def blocks(self) -> DenseTau:
        return self  # no cursor: any block is a view

    def fill(
        self, tau: torch.Tensor, theta0: torch.Tensor, start: int, stop: int, scratch: torch.Tensor
    ) -> torch.Tensor:
        """τ̃ of entries [start, stop): a view of the held tensor (nothing is copied)."""
        return self.data[start:stop]


@dataclass
class SparseTau:
    """τ̃ of one tensor of one source: its float32 values (γ applied) at sorted flat positions;
    every entry not listed is +0.0 (−0.0 entries are listed, with their sign)."""

    shape: tuple[int, ...]
    positions: torch.Tensor  # int32 (int64 past 2^31 entries), ascending
    values: torch.Tensor  # float32

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.positions, self.values))

    def to(self, device: torch.device | str) -> SparseTau:
        return replace(self, positions=self.positions.to(device), values=self.values.to(device))

    def blocks(self) -> _SparseBlocks:
        return _SparseBlocks(self)


class _SparseBlocks:
    """Reads a `SparseTau` one block of flat entries at a time, in order (a cursor)."""

    def __init__(self, st: SparseTau):
        self.st, self.used = st, 0

    def fill(
        self, tau: torch.Tensor, theta0: torch.Tensor, start: int, stop: int, scratch: torch.Tensor
    ) -> torch.Tensor:
        """τ̃ of entries [start, stop) into `tau`: zeros, the listed values scattered in."""
        positions = self.st.positions
        lo = self.used
        hi = lo + int(torch.searchsorted(positions[lo:], stop))  # sorted: the block's entries are next
        self.used = hi
        index = positions[lo:hi].to(torch.int64).sub_(start)
        return tau.zero_().index_copy_(0, index, self.st.values[lo:hi])  # unique indices: 5-20× scatter_ on CPU


ResidentTau = Union[CompactTensor, DenseTau, SparseTau]


def to_form(ct: CompactTensor, theta0: torch.Tensor, form: str) -> ResidentTau:
    """`ct` held in `form` (dense, sparse, index — its positions — or bitmask: `ct` itself), built against θ0
    (`theta0`: the tensor `ct` was encoded against, on the device it will live on), a block
    of CONVERT_BLOCK entries at a time: the transient memory is a few blocks."""
    if form == "bitmask":
        return ct
    if form == "index":
        return ct.indexed().to(theta0.device)
    if form not in ("dense", "sparse"):
        raise DotsError(f"unknown resident form {form!r}")
    flat0 = theta0.reshape(-1)
    n = flat0.numel()
    if n != ct.numel:
        raise DotsError(f"a task vector has {ct.numel} entries, θ0 {n}: stale cache?")
    device = flat0.device
    ct = ct.to(device)
    reader = ct.blocks()
    step = max(1, min(n, CONVERT_BLOCK))
    scratch = torch.empty(step, dtype=torch.float32, device=device)
    if form == "dense":
        data = torch.empty(n, dtype=torch.float32, device=device)
        for start in range(0, n, step):
            stop = min(start + step, n)
            reader.fill(data[start:stop], flat0[start:stop].to(torch.float32), start, stop, scratch)
        return DenseTau(tuple(ct.shape), data)
    buf = torch.empty(step, dtype=torch.float32, device=device)
    positions, values = [], []
    for start in range(0, n, step):
        stop = min(start + step, n)
        tau = reader.fill(buf[: stop - start], flat0[start:stop].to(torch.float32), start, stop, scratch)
        where = ((tau != 0) | torch.signbit(tau)).nonzero().view(-1)  # −0.0 kept: it is not the default
        values.append(tau[where])
        positions.append(where.add_(start).to(position_dtype(n)))
    empty = torch.empty(0, device=device)
    return SparseTau(
        tuple(ct.shape),
        torch.cat(positions) if positions else empty.to(position_dtype(n)),
        torch.cat(values) if values else empty,
    )
