"""θ0 + Σ λ_i τ̃_i in one compiled pass per block, for every resident form (#38).

The streaming combine (`dots.vectors.synth.combine_into`) makes one pass per operation (40-50
bytes of traffic per parameter where 12 would do for dense τ̃). Here one `torch.compile`d function
per block (Triton on CUDA, C++ on the CPU) reads θ0 and each τ̃ once in its form and writes once:
acc = float32(θ0); acc = acc + λ_i·τ̃_i per source in order; out = cast(acc). τ̃_i: dense, a load;
`full`, (float32(θ_i) − acc₀)·γ; bitmask, each bit and its slot among the values from the bytes'
running count; index and sparse, scattered into a block of value slots. Kept entries get the
streaming path's values, every other +0.0, and its order of operations (λ·τ̃ + acc one FMA in
both), so the same bytes. Each combination of forms is compiled once and its bytes checked
against the streaming path on its first tensor (a mismatch turns the pass off); by default it is
then timed against streaming and kept only where it is not slower (`keep_if_faster`). Tensors
with stored −0.0 (`negzero`), blocks under 2 entries or kept values: the streaming path.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from functools import partial
from typing import Callable, Sequence

import torch

from dots.runtime.timing import race
from dots.vectors.compact import CompactTensor
from dots.vectors.forms import DenseTau, ResidentTau, SparseTau

__all__ = ["FusedCombine", "describe", "block_pass", "fused_wanted", "keep_if_faster", "popcount", "prepare"]

log = logging.getLogger(__name__)

# Where the fused pass is tried (then kept if not slower). CUDA: every form. CPU: the forms it
# measured faster (benchmarks/results/swap.md), for models of at least CPU_MIN_ENTRIES merged entries,
# where the compile (6-90 s per combination on 2 loaded cores) pays for itself within a search.
CPU_FORMS = ("dense",)  # at 0.5B shapes index and bitmask streamed faster (benchmarks/results/swap.md, 2026-11-28)
CPU_MIN_ENTRIES = 2**26
RECOMPILE_LIMIT = 64  # combinations of (forms, dtypes) one process may compile


def fused_wanted(device: torch.device, form: str, entries: int) -> bool:
    """Whether swaps on `device` with τ̃ resident in `form` take the fused pass by default."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and form in CPU_FORMS and entries >= CPU_MIN_ENTRIES


def _kind(tau: ResidentTau) -> str:
    return "dense" if isinstance(tau, DenseTau) else "sparse" if isinstance(tau, SparseTau) else tau.form


def block_pass(kinds: tuple[str, ...], theta0: torch.Tensor, out: torch.Tensor, coef: torch.Tensor, *parts):
    """out = cast(float32(θ0) + Σ λ_i τ̃_i) for one block; `coef` is [λ; γ] (float32, 2 × K),
    `parts` each source's tensors for the block (see `FusedCombine._parts`)."""
    base = theta0.to(torch.float32)
    acc = base
    n = base.shape[0]
    at = 0
    for i, kind in enumerate(kinds):
        if kind == "dense":
            tau = parts[at]
            at += 1
        elif kind == "full":
            tau = (parts[at].to(torch.float32) - base) * coef[1, i]
            at += 1
        else:
            if kind == "bitmask":  # bit b of byte j: kept, and its slot from the bytes' running count
                where, ends, values = parts[at], parts[at + 1], parts[at + 2]
                at += 3
                byte = where.unsqueeze(1).to(torch.int32)
                shifts = torch.arange(8, dtype=torch.int32, device=where.device)
                kept = ((byte >> shifts) & 1).view(-1)[:n]
                slot = (ends.unsqueeze(1) - popcount(byte >> (shifts + 1))).view(-1)[:n] - 1
                hit = kept.bool()
            else:  # positions relative to the block: each entry's slot in `values`, or −1
                where, values = parts[at], parts[at + 1]
                at += 2
                count = where.shape[0]
                slots = torch.arange(count, dtype=torch.int32, device=where.device)
                slot = torch.full((n,), -1, dtype=torch.int32, device=where.device).index_put_((where.long(),), slots)
                hit = slot >= 0
            value = values[slot.clamp(min=0)]
            held = value if kind == "sparse" else (value.to(torch.float32) - base) * coef[1, i]
            tau = torch.where(hit, held, 0.0)
        acc = acc + coef[0, i] * tau
    out.copy_(acc)


class FusedCombine:
    """The fused pass for one device: `run` writes one tensor's θ0 + Σλτ̃ (False: not handled,
    the caller takes the streaming path); `compile_s` is the time compiling and checking took."""

    def __init__(self, device: torch.device):
        import torch._dynamo.config as dynamo

        self.device = device
        self.enabled = True
        self.compile_s = 0.0
        self.raced: tuple[float, float] | None = None
        self.checked: set[tuple] = set()
        self._bounds: dict[int, tuple[ResidentTau, int, list[int]]] = {}
        self._coef: dict[tuple, torch.Tensor] = {}
        dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
        options = {"cpp.enable_floating_point_contract_flag": "fast"}  # a + λ·τ as one FMA, as eager
        self._compiled: Callable = torch.compile(block_pass, dynamic=True, options=options)  # type: ignore[arg-type]

    def _bounds_of(self, tau: ResidentTau, step: int) -> list[int]:
        """Where each block's kept values start in the tensor's values (one entry per block, then
        the total), computed once per tensor and block size."""
        held = self._bounds.get(id(tau))
        if held is not None and held[0] is tau and held[1] == step:
            return held[2]
        kind, n = _kind(tau), math.prod(tau.shape)
        starts = list(range(0, n, step))
        if kind in ("dense", "full"):
            bounds = starts + [n]
        elif kind == "bitmask":  # bits before each block (blocks start on a byte): a running count
            counts = popcount(_where(tau).to(torch.int64))
            before = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
            bounds = before[[s >> 3 for s in starts] + [before.numel() - 1]].tolist()
        else:
            positions = tau.positions if isinstance(tau, SparseTau) else _where(tau)
            edges = torch.tensor(starts + [n], dtype=positions.dtype, device=positions.device)
            bounds = torch.searchsorted(positions, edges).tolist()
        self._bounds[id(tau)] = (tau, step, bounds)
        return bounds

    def _coefficients(self, taus: Sequence[tuple[ResidentTau, float]]) -> torch.Tensor:
        """[λ; γ] as a float32 tensor on the device, made once per distinct set of values."""
        key = tuple((lam, getattr(tau, "gamma", 1.0)) for tau, lam in taus)
        coef = self._coef.get(key)
        if coef is None:
            if len(self._coef) > 256:
                self._coef.clear()
            rows = [[lam for lam, _ in key], [gamma for _, gamma in key]]
            coef = self._coef[key] = torch.tensor(rows, dtype=torch.float32, device=self.device)
        return coef

    def run(
        self,
        out: torch.Tensor,
        theta0: torch.Tensor,
        taus: Sequence[tuple[ResidentTau, float]],
        step: int,
        streaming: Callable[[], object],
    ) -> bool:
        """Write cast(θ0 + Σ λ_i τ̃_i) into `out` (flat, θ0 flat) a block of `step` entries at a time;
        False (nothing written) where the pass does not apply. A combination of forms and dtypes
        new here is compiled, run into a spare buffer and its bytes compared with `streaming()`'s
        (into `out`): a difference turns the pass off for good; the seconds go to `compile_s`."""
        n = theta0.numel()
        if not self.enabled or not taus or n < 2 or theta0.device.type != self.device.type:
            return False
        if any(getattr(tau, "negzero", None) is not None for tau, _ in taus) or (n > step and step % 8):
            return False  # stored −0.0; blocks must start on a byte of a bitmask
        bounds = [self._bounds_of(tau, step) for tau, _ in taus]
        if any(b - a < 2 for per in bounds for a, b in zip(per, per[1:])) or n % step == 1:
            return False
        key = self.key(theta0, taus)
        if key in self.checked:
            self._pass(out, theta0, taus, step, bounds)
            return True
        began = time.perf_counter()
        spare = torch.empty_like(out)
        try:
            self._pass(spare, theta0, taus, step, bounds)
        except Exception as exc:  # inductor's many failures (no compiler, a backend error): stream
            self.enabled = False
            log.warning("the fused swap failed to compile (%s): swaps take the streaming path", exc)
            return False
        streaming()
        self.checked.add(key)
        if not torch.equal(spare.view(torch.uint8), out.view(torch.uint8)):  # bytes: −0.0 ≠ +0.0
            self.enabled = False
            log.warning("the fused swap differs from the streaming one (%s): swaps take the streaming path", key)
        self.compile_s += time.perf_counter() - began
        return True

    def key(self, theta0: torch.Tensor, taus: Sequence[tuple[ResidentTau, float]]) -> tuple:
        """What a compiled pass depends on besides sizes: θ0's dtype (the output's), each form and
        its tensors' dtypes."""
        return (theta0.dtype, *(_signature(tau) for tau, _ in taus))

    def _pass(self, out, theta0, taus, step: int, bounds: list[list[int]]) -> None:
        kinds = tuple(_kind(tau) for tau, _ in taus)
        coef = self._coefficients(taus)
        n = theta0.numel()
        for b, start in enumerate(range(0, n, step)):
            stop = min(start + step, n)
            parts = [p for (tau, _), per in zip(taus, bounds) for p in _parts(tau, start, stop, per[b], per[b + 1])]
            self._compiled(kinds, theta0[start:stop], out[start:stop], coef, *parts)


def _parts(tau: ResidentTau, start: int, stop: int, lo: int, hi: int) -> list[torch.Tensor]:
    """The tensors of τ̃'s block [start, stop) that `block_pass` reads (its kept values [lo, hi))."""
    if isinstance(tau, DenseTau):
        return [tau.data[start:stop]]
    if isinstance(tau, SparseTau):
        return [tau.positions[lo:hi] - start, tau.values[lo:hi]]
    values = tau.values.reshape(-1)
    if tau.form == "full":
        return [values[start:stop]]
    assert tau.where is not None
    if tau.form == "bitmask":  # the bytes of the block and their running count of kept bits
        where = tau.where[start >> 3 : (stop + 7) >> 3]
        return [where, torch.cumsum(popcount(where.to(torch.int32)), 0, dtype=torch.int32), values[lo:hi]]
    return [tau.where[lo:hi] - start, values[lo:hi]]


def popcount(x: torch.Tensor) -> torch.Tensor:
    """Bits set per entry of a tensor of bytes (0-255), in arithmetic that fuses into the pass.
    The running count over the bytes is aten's cumsum, outside: a compiled scan made the bitmask
    pass take 5.4 s a swap on an H200 (benchmarks/RESULTS.md)."""
    x = x - ((x >> 1) & 0x55)
    x = (x & 0x33) + ((x >> 2) & 0x33)
    return (x + (x >> 4)) & 0x0F


def _where(tau: ResidentTau) -> torch.Tensor:
    assert isinstance(tau, CompactTensor) and tau.where is not None
    return tau.where


def _signature(tau: ResidentTau) -> tuple:
    """What a compiled pass depends on besides sizes: the form and its tensors' dtypes."""
    if isinstance(tau, DenseTau):
        return ("dense", tau.data.dtype)
    if isinstance(tau, SparseTau):
        return ("sparse", tau.positions.dtype, tau.values.dtype)
    return (tau.form, tau.values.dtype, None if tau.where is None else tau.where.dtype)


Params = Sequence[tuple[torch.Tensor, Sequence[ResidentTau | None]]]  # (θ0, τ̃ by source; None: none kept)
WARM_LAMBDAS = (0.75, -1.25, 1.5, 0.5)  # λ of the sources in the checks before the first swap


def prepare(
    device: torch.device,
    form: str,
    params: Params,
    combine: Callable[..., object],
    wanted: bool | None = None,
) -> FusedCombine | None:
    """The fused pass for a resident synthesis on `device` in `form` (None where not wanted:
    `fused_wanted`, or `wanted`), compiled, checked and, unless `wanted`, timed at the engine's
    start; `combine(out, θ0, taus, fused=…)`: the synthesis' combine (`combine_into`)."""
    entries = sum(theta0.numel() for theta0, _ in params)
    if not (wanted if wanted is not None else fused_wanted(device, form, entries)):
        return None
    fused = FusedCombine(device)
    warm_up(fused, params, lambda out, theta0, taus: combine(out, theta0, taus, fused=fused))
    if wanted is None and fused.enabled:
        keep_if_faster(fused, params, combine)
    return fused


def keep_if_faster(
    fused: FusedCombine,
    params: Params,
    combine: Callable[..., object],
) -> None:
    """Off where slower than streaming, both combining the largest parameter with every source,
    timed until the device is done (`race`; `fused.raced`: fused, streaming seconds)."""
    theta0, taus = max(params, key=lambda p: p[0].numel(), default=(None, []))
    picked = [(tau, WARM_LAMBDAS[i % 4]) for i, tau in enumerate(taus) if tau is not None]
    if theta0 is None or not picked:
        return
    out = torch.empty_like(theta0)
    fast, slow = (partial(combine, out, theta0, picked, fused=way) for way in (fused, None))
    fused.raced = race(fast, slow, fused.device)
    if fused.raced[0] > fused.raced[1]:
        fused.enabled = False
        log.info("the fused swap is slower than streaming here (%.4f s against %.4f s): swaps stream", *fused.raced)


def describe(fused: FusedCombine | None) -> dict:
    """{"fused": whether swaps take the fused pass, "compile_s": the seconds compiling it took}."""
    return {"fused": fused is not None and fused.enabled, "compile_s": round(fused.compile_s if fused else 0.0, 3)}


def warm_up(
    fused: FusedCombine,
    params: Params,
    combine: Callable[[torch.Tensor, torch.Tensor, list[tuple[ResidentTau, float]]], object],
) -> None:
    """`combine(out, θ0, taus)` into a spare output on the smallest parameter of each combination
    of forms and dtypes, for every set of sources a swap may combine (all, each alone, and up to
    3 sources every other set): each is compiled and checked once."""
    count = max((len(taus) for _, taus in params), default=0)
    sets = [list(s) for r in range(1, count + 1) for s in itertools.combinations(range(count), r)]
    if count > 3:
        sets = [[i] for i in range(count)] + [list(range(count))]
    ordered = sorted(params, key=lambda p: p[0].numel())
    for chosen in sets:
        for theta0, taus in ordered:
            picked = [(tau, WARM_LAMBDAS[i % 4]) for i in chosen if i < len(taus) and (tau := taus[i]) is not None]
            if picked and fused.enabled and fused.key(theta0, picked) not in fused.checked:
                combine(torch.empty_like(theta0), theta0, picked)
