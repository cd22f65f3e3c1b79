"""Compact τ̃: one tensor of one source's sparsified task vector (DoTS Eq. 3) stored as θ_i's
own values where the mask keeps it, and rebuilt in float32 at synthesis (Eq. 6).

τ̃_i = γ_i·(θ_i − θ0)⊙M_i. The synthesis reads θ0 anyway, so the cache need not hold the
difference: it holds *where* M_i keeps an entry and θ_i's value there, in the checkpoint's
own dtype. Where is one of three forms, whichever is smallest for this tensor:

- `bitmask`: 1 bit per entry (uint8, little-endian bit order) — 1/8 byte per parameter;
- `index`: the sorted flat positions (int32; int64 past 2^31 entries) — 4 bytes per kept
  entry, smaller below a density of 1/32;
- `full`: nothing, every entry is stored (at density 1, when M keeps every non-zero τ).

bf16 at d = 0.3: 1/8 + 0.3·2 = 0.725 bytes per parameter (dense float32 τ̃: 4).

Rebuilding uses the dense path's very operations, so θ0 + Σ λ_i τ̃_i has the same bits:
τ = float32(θ_i) − float32(θ0) (`Tensor.sub_`, as `dots.vectors.deltas` computes it), then
`mul_(γ)` when γ ≠ 1 (as the dense cache applied it at read). The kept positions are those
where τ⊙M ≠ 0; an entry M keeps with τ = 0 is rebuilt as a zero like every other one.

Zeros carry a sign, and the dense τ̃ has −0.0 wherever τ ≤ −0 is masked out (τ·0 = −0).
Adding λ·(±0) changes nothing unless the accumulator is itself −0 — which happens only
where θ0 = −0.0 (x + y rounds to −0 only when both are −0). There today's result depends
on those signs, so the few positions where θ0 = −0.0 and τ̃ = −0.0 are stored (`negzero`,
int64, usually empty) and rebuilt as −0.0; every other zero is rebuilt as +0.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from dots.errors import DotsError

__all__ = [
    "CompactTensor",
    "NEGZERO",
    "TauBlocks",
    "VALUES",
    "WHERE",
    "encode",
    "form_bytes",
    "has_negative_zero",
    "position_dtype",
    "estimate_bytes",
]

FORMS = ("bitmask", "index", "full")
KEPT_IN_BLOCK = 1 << 24  # entries unpacked at a time by `CompactTensor.kept_in` (a multiple of 8)
# the safetensors entries of one tensor in the cache: name + suffix
VALUES, WHERE, NEGZERO = ".__values__", ".__where__", ".__negzero__"
INT32_POSITIONS = 2**31 - 1  # tensors with more entries store int64 positions
_SHIFTS = torch.arange(8, dtype=torch.uint8)


# −0.0 is the sign bit alone: one integer compare instead of (x == 0) & signbit(x), 3× faster on CPU
_SIGN_BIT = {torch.bfloat16: (torch.int16, -(2**15)), torch.float16: (torch.int16, -(2**15))}
_SIGN_BIT[torch.float32] = (torch.int32, -(2**31))


def has_negative_zero(t: torch.Tensor) -> bool:
    """Whether `t` holds a −0.0 entry."""
    spec = _SIGN_BIT.get(t.dtype)
    if spec is None or not t.is_contiguous():
        return bool(((t == 0) & torch.signbit(t)).any())
    return bool((t.view(spec[0]) == spec[1]).any())


def bitmask_positions(bitmask: np.ndarray, start: int, stop: int) -> torch.Tensor:
    """Kept positions in [start, stop) of a little-endian bitmask, relative to start (int64,
    ascending): numpy's unpackbits and flatnonzero on a bool view, the fast pair on CPU."""
    bits = np.unpackbits(bitmask[start >> 3 : (stop + 7) >> 3], bitorder="little").view(np.bool_)
    skip = start & 7
    return torch.from_numpy(np.flatnonzero(bits[skip : skip + stop - start]))


def position_dtype(numel: int) -> torch.dtype:
    return torch.int32 if numel <= INT32_POSITIONS else torch.int64


def form_bytes(numel: int, kept: int, itemsize: int) -> dict[str, int]:
    """Bytes each form needs (values + where) for `kept` of `numel` entries of `itemsize`."""
    pos = torch.empty((), dtype=position_dtype(numel)).element_size()
    return {"bitmask": (numel + 7) // 8 + kept * itemsize, "index": kept * (pos + itemsize), "full": numel * itemsize}


def estimate_bytes(numel: int, density: float, itemsize: int) -> int:
    """Bytes of one tensor's compact τ̃ at `density` before it is built (the memory plan):
    the smaller of bitmask and positions for round(density·n) kept entries, θ_i whole at
    density 1. An upper bound for `scope: tensor` (fewer are kept where τ has fewer
    non-zero entries); summed over a model, also for `scope: global`, up to the tensors
    that would have picked positions (the bitmask total n/8 + k·itemsize does not
    depend on how the k kept entries spread over the tensors)."""
    if density >= 1.0:
        return numel * itemsize
    sizes = form_bytes(numel, round(density * numel), itemsize)
    return min(sizes["bitmask"], sizes["index"])


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def encode(sparse: torch.Tensor, theta: torch.Tensor, theta0: torch.Tensor) -> tuple[str, dict[str, torch.Tensor]]:
    """The compact form of τ⊙M (`sparse`, float32, as `dots.vectors.sparsify` yields it):
    (form, {suffix: tensor}) with θ_i's values (`theta`, the source's dtype, the base's rows)
    at the non-zero entries of `sparse`. Checks that rebuilding gives `sparse` bit for bit
    there (a DotsError otherwise: the inputs changed under the cache)."""
    s = sparse.reshape(-1)
    th = theta.reshape(-1)
    base = theta0.reshape(-1)
    n = s.numel()
    if th.numel() != n or base.numel() != n:
        raise DotsError(f"compact τ̃: {n} entries of τ⊙M, {th.numel()} of θ_i, {base.numel()} of θ0")
    keep = s != 0
    flags = keep.numpy()
    positions = torch.from_numpy(np.flatnonzero(flags))  # kept entries, ascending; gathers by them
    kept = positions.numel()  # are several times faster than masked_select on CPU
    sizes = form_bytes(n, kept, th.element_size())
    if sizes["full"] < min(sizes["bitmask"], sizes["index"]):
        tau = th.to(torch.float32, copy=True).sub_(base.to(torch.float32))
        if torch.equal(_bits(tau), _bits(s.contiguous())):  # M keeps every non-zero τ: store θ_i whole
            return "full", {VALUES: th.contiguous()}
    del sizes["full"]
    form = min(sizes, key=lambda f: sizes[f])  # ties: bitmask
    values = th[positions]
    tau = values.to(torch.float32, copy=True).sub_(base[positions].to(torch.float32))
    if not torch.equal(_bits(tau), _bits(s[positions])):
        raise DotsError("compact τ̃: θ_i − θ0 differs from the sparsified τ at kept entries (inputs changed?)")
    del tau
    parts = {VALUES: values}
    if form == "bitmask":
        parts[WHERE] = torch.from_numpy(np.packbits(flags, bitorder="little"))
    else:
        parts[WHERE] = positions.to(position_dtype(n))
    zero0 = base == 0
    if bool(zero0.any()):  # θ0 = −0.0 where τ̃ = −0.0: the one place a zero's sign reaches the merge
        negzero = zero0 & torch.signbit(base) & (s == 0) & torch.signbit(s)
        if bool(negzero.any()):
            parts[NEGZERO] = torch.from_numpy(np.flatnonzero(negzero.numpy()))
    return form, parts


@dataclass
class CompactTensor:
    """τ̃ of one tensor of one source: θ_i's values at the kept entries, where they are
    (`form`), the −0.0 positions that matter, and γ. Rebuilt by `TauBlocks`."""

    shape: tuple[int, ...]
    form: str
    values: torch.Tensor
    where: torch.Tensor | None = None
    negzero: torch.Tensor | None = None
    gamma: float = 1.0

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise DotsError(f"compact τ̃: unknown form {self.form!r} (stale cache?)")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        parts = [t for t in (self.values, self.where, self.negzero) if t is not None]
        return sum(t.numel() * t.element_size() for t in parts)

    def to(self, device: torch.device | str) -> CompactTensor:
        where = None if self.where is None else self.where.to(device)
        negzero = None if self.negzero is None else self.negzero.to(device)
        return replace(self, values=self.values.to(device), where=where, negzero=negzero)

    def blocks(self) -> TauBlocks:
        return TauBlocks(self)

    def positions(self) -> torch.Tensor:
        """Flat positions of the kept entries (int64, ascending, on the CPU)."""
        if self.form == "full":
            return torch.arange(self.numel)
        where = self.indexed().where
        assert where is not None
        return where.to(device="cpu", dtype=torch.int64)

    def indexed(self) -> CompactTensor:
        """The same τ̃ with a bitmask replaced by the kept positions (the `index` form, on the
        device the bitmask was on): a swap then reads where the entries are instead of decoding
        the bitmask (`dots.vectors.forms`, resident form `index`). Unpacked a block at a time."""
        if self.form != "bitmask":
            return self
        assert self.where is not None
        where = self.where.cpu().numpy()
        dtype = position_dtype(self.numel)
        parts = [torch.empty(0, dtype=dtype)]
        for b0 in range(0, self.numel, KEPT_IN_BLOCK):
            b1 = min(b0 + KEPT_IN_BLOCK, self.numel)
            parts.append(bitmask_positions(where, b0, b1).add_(b0).to(dtype))
        return replace(self, form="index", where=torch.cat(parts).to(self.where.device))

    def kept_in(self, theta0: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        """where(M, θ_i, θ0): θ0 (a CPU tensor of the base's dtype) with θ_i's values at the kept
        entries — what a source looks like through the mask; vLLM workers load it to find M
        in their own parameters' layout (`dots.engines.vllm.resident`). `in_place`: write into
        `theta0` itself (a contiguous CPU tensor the caller owns). A bitmask is unpacked a block
        at a time: no mask or positions of the whole tensor."""
        own = in_place and theta0.device.type == "cpu" and theta0.is_contiguous()
        out = theta0 if own else theta0.to("cpu", copy=True).contiguous()
        flat = out.view(-1)
        values = self.values.to("cpu")
        if self.form != "bitmask":
            flat[self.positions()] = values.to(out.dtype)
            return out
        assert self.where is not None
        where = self.where.cpu().numpy()
        used = 0
        for b0 in range(0, self.numel, KEPT_IN_BLOCK):
            b1 = min(b0 + KEPT_IN_BLOCK, self.numel)
            positions = bitmask_positions(where, b0, b1)  # then index_copy_: 4× a boolean index_put on CPU
            kept = positions.numel()
            flat[b0:b1].index_copy_(0, positions, values[used : used + kept].to(out.dtype))
            used += kept
        return out

    def dense(self, theta0: torch.Tensor) -> torch.Tensor:
        """τ̃ as one float32 tensor of θ0's shape, given θ0 (`TaskVectors.get`: `dots_fixed`, tests)."""
        flat0 = theta0.reshape(-1)
        n = flat0.numel()
        tau = torch.empty(n, dtype=torch.float32, device=flat0.device)
        values = torch.empty(n, dtype=torch.float32, device=flat0.device)
        return self.blocks().fill(tau, flat0.to(torch.float32), 0, n, values).view(theta0.shape)


class TauBlocks:
    """Rebuilds the τ̃ of a `CompactTensor` one block of flat entries at a time, in order
    (block [start, stop) after block [.., start)): a cursor into the kept values."""

    def __init__(self, ct: CompactTensor):
        self.ct = ct
        self.used = 0  # values consumed by earlier blocks
        self.next = 0  # where the next block must start
        host = ct.form == "bitmask" and ct.where is not None and ct.where.device.type == "cpu"
        self._where_np = ct.where.numpy() if host else None  # type: ignore[union-attr]
        self._shifts = _SHIFTS.to(ct.values.device)

    def _positions(self, start: int, stop: int) -> torch.Tensor:
        """Kept positions in [start, stop), relative to start (int64, ascending)."""
        where = self.ct.where
        assert where is not None
        if self.ct.form == "index":
            lo = self.used
            hi = lo + int(torch.searchsorted(where[lo:], stop))  # positions are sorted
            return where[lo:hi].to(torch.int64).sub_(start)
        if self._where_np is not None:
            return bitmask_positions(self._where_np, start, stop)
        b0, b1, skip = start >> 3, (stop + 7) >> 3, start & 7
        flags = where[b0:b1].unsqueeze(1).bitwise_right_shift(self._shifts).bitwise_and_(1).view(-1)
        return flags[skip : skip + stop - start].nonzero().view(-1)

    def fill(
        self, tau: torch.Tensor, theta0: torch.Tensor, start: int, stop: int, scratch: torch.Tensor
    ) -> torch.Tensor:
        """τ̃ of entries [start, stop) into `tau` (float32, stop − start entries), given θ0 of
        those entries in float32 (`theta0`) and a float32 `scratch` of at least as many."""
        if start != self.next:
            raise DotsError(f"compact τ̃ read out of order: block at {start}, expected {self.next}")
        self.next = stop
        ct = self.ct
        if ct.form == "full":
            tau.copy_(ct.values[start:stop]).sub_(theta0)  # float32(θ_i) − float32(θ0)
            if ct.gamma != 1.0:
                tau.mul_(ct.gamma)
        else:  # the arithmetic on the kept entries only, then scattered into zeros
            positions = self._positions(start, stop).to(tau.device)
            kept = positions.numel()
            values = scratch[:kept].copy_(ct.values[self.used : self.used + kept])  # float32(θ_i)
            self.used += kept
            base = torch.index_select(theta0, 0, positions, out=tau[:kept])  # float32(θ0) there
            values.sub_(base)
            if ct.gamma != 1.0:
                values.mul_(ct.gamma)
            tau.zero_().index_copy_(0, positions, values)  # +0.0 elsewhere, as θ0 − θ0 and γ·(+0.0) are
        if ct.negzero is not None:
            lo, hi = (int(torch.searchsorted(ct.negzero, x)) for x in (start, stop))
            if hi > lo:
                tau.index_fill_(0, ct.negzero[lo:hi].to(tau.device) - start, -0.0)
        return tau
