"""DoTS synthesis, Eq. 6: θ(λ) = θ0 + Σ_i λ_i·τ̃_i, one tensor at a time (docs/method.md §2).

λ is one value per source, or one per source and module group (`dots.vectors.coefficients`;
the search's `search.granularity=module`): a tensor takes its group's λ.

`synthesize` streams (name, tensor) in the base checkpoint's naming and order — the
input of `Engine.swap_weights`, of vLLM's `reload_weights` and of `CheckpointWriter`.
Every call reads the pristine base from disk (never adds then subtracts), sums in
float32 on the chosen device (CUDA when present) and casts each result to the base
tensor's dtype. Tensors outside the task vectors are the base's; an embedding to which
a source added rows gets those rows appended (they are the source's own values).

τ̃_i is read in its compact form (`dots.vectors.compact`: where the mask keeps an entry and
θ_i's value there) and rebuilt block by block against θ0, which the synthesis holds anyway.

`ResidentSynthesizer` computes the same values from θ0 and τ̃ held in memory on the device
(no disk reads, no allocation per call), τ̃ in one of the resident forms of
`dots.vectors.forms` (dense, sparse, index or the compact bitmask: the same bits), and can write
them straight into the live parameters a block at a time: the engines use it with
`synth_cache: memory`, or `auto` when the memory plan (`dots.plan`) finds room. Its swaps take
the fused pass of `dots.vectors.fused` (one compiled pass per block, the same bytes) on CUDA, and
on the CPU in the forms and at the sizes where that measured faster; the streaming combine
otherwise.
"""

from __future__ import annotations

from functools import partial
from typing import Iterator, Mapping, Sequence

import torch
from torch.profiler import record_function

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import TaskVectors
from dots.vectors.coefficients import Coefficients, check_coefficients, tensor_lambdas
from dots.vectors.forms import BY_SPEED, ResidentTau, to_form
from dots.vectors.fused import FusedCombine, describe, prepare

__all__ = ["ResidentSynthesizer", "check_coefficients", "combine_into", "new_scratch", "synthesize", "synthesize_dict"]


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# CPU: the float32 accumulator is worked in blocks of this many entries (4 MiB), so the
# K + 2 passes over it stay in cache and only θ0, τ̃ and the output cross memory once:
# the arithmetic of a 0.5B swap ran 1.3-1.6x faster than with whole-tensor passes
# (benchmarks/results/swap.md, "Profile of a weight swap"). CUDA: blocks of up to 2^26 entries
# (256 MiB in float32), so the scratch stays bounded beside an inference engine however
# large the embedding is, while each kernel still covers millions of entries.
CPU_BLOCK_ENTRIES = 2**20
CUDA_BLOCK_ENTRIES = 2**26
SCRATCH_BUFFERS = 4  # accumulator, float32 θ0, τ̃ of one source, its kept values


def block_entries(device: torch.device, numel: int) -> int:
    """How many entries one float32 accumulator block holds on `device` (≥ 1)."""
    return max(1, min(numel, CPU_BLOCK_ENTRIES if device.type == "cpu" else CUDA_BLOCK_ENTRIES))


def new_scratch(device: torch.device, numel: int) -> torch.Tensor:
    """The float32 scratch `combine_into` works in, for tensors of up to `numel` entries."""
    return torch.empty(SCRATCH_BUFFERS * block_entries(device, numel), dtype=torch.float32, device=device)


def combine_into(
    out: torch.Tensor,
    theta0: torch.Tensor,
    taus: Sequence[tuple[ResidentTau, float]],
    scratch: torch.Tensor,
    fused: FusedCombine | None = None,
) -> torch.Tensor:
    """out[:len(θ0)] = cast(θ0 + Σ λ_i τ̃_i), Eq. 6: float32 sums in source order, one block of
    entries at a time — the one combine of every synthesis (streaming, resident, vLLM's workers).
    Given `fused` (`dots.vectors.fused`), one compiled pass per block where it applies (the same
    bits, checked the first time each combination of forms comes); otherwise the streaming path:
    each τ̃_i's block rebuilt from its form (`dots.vectors.compact.TauBlocks`: float32(θ_i) −
    float32(θ0) at the kept entries, γ, zeros elsewhere; or the same values held dense or sparse,
    `dots.vectors.forms`) and added with `add_(τ̃, alpha=λ)` — the dense path's operations on the
    dense path's values, so the same bits; elementwise, so any block size gives them too.
    `out` may be a live parameter: each block is cast and copied into it, no full-size temporary."""
    for ct, _ in taus:
        if tuple(ct.shape) != tuple(theta0.shape):
            raise DotsError(f"a task vector has shape {tuple(ct.shape)}, the base {tuple(theta0.shape)}: stale cache?")
    n = theta0.numel()
    flat_out = out.view(-1)[:n]  # rows a source added to an embedding come after θ0's rows
    flat_theta0 = theta0.reshape(-1)
    step = scratch.numel() // SCRATCH_BUFFERS
    if fused is not None and fused.run(
        flat_out, flat_theta0, taus, step, lambda: _stream(flat_out, flat_theta0, taus, scratch)
    ):
        return out
    _stream(flat_out, flat_theta0, taus, scratch)
    return out


def _stream(
    flat_out: torch.Tensor, flat_theta0: torch.Tensor, taus: Sequence[tuple[ResidentTau, float]], scratch: torch.Tensor
) -> None:
    """The streaming path of `combine_into` (flat tensors): one operation per pass over a block."""
    n = flat_theta0.numel()
    step = scratch.numel() // SCRATCH_BUFFERS
    acc_buf, base_buf, tau_buf, values_buf = scratch.view(SCRATCH_BUFFERS, step)
    readers = [(ct.blocks(), lam) for ct, lam in taus]
    if not readers:  # θ0 itself (float32 and back is exact)
        flat_out.copy_(flat_theta0)
        return
    for start in range(0, n, step):
        stop = min(start + step, n)
        base = flat_theta0[start:stop]
        if base.dtype != torch.float32:
            base = base_buf[: stop - start].copy_(base)
        acc = acc_buf[: stop - start]
        for i, (reader, lam) in enumerate(readers):
            tau = reader.fill(tau_buf[: stop - start], base, start, stop, values_buf)
            if i == 0:
                torch.add(base, tau, alpha=lam, out=acc)  # acc = θ0, acc += λ·τ̃ in one pass: same kernel
            else:
                acc.add_(tau, alpha=lam)
        flat_out[start:stop].copy_(acc)


def synthesize(
    task_vectors: TaskVectors,
    coefficients: Coefficients,
    device: str | torch.device | None = None,
    base: Checkpoint | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield θ0 + Σ λ_i τ̃_i for every tensor of the base (copied tensors unchanged).

    Reads θ0 and each compact τ̃ from disk tensor by tensor (memory: a few tensors; bytes
    read per source: the compact entry, 0.725 per parameter for bf16 at density 0.3).
    Results live on `device` in the base tensor's dtype; a source with λ = 0 (for that tensor's
    module group, with per-group coefficients) is not read.
    """
    lambdas = check_coefficients(task_vectors, coefficients)
    device = torch.device(device) if device is not None else default_device()
    base = base if base is not None else Checkpoint(task_vectors.base_path)
    merged = set(task_vectors.names)
    scratch = torch.empty(0, dtype=torch.float32, device=device)
    for name in base.names:
        with record_function("dots.vectors.synth.read"):  # labels for torch.profiler (benchmarks/swap/profile.py)
            theta0 = base.get(name)
            taus = (
                [(task_vectors.compact(key, name).to(device), lam) for key, lam in tensor_lambdas(lambdas, name)]
                if name in merged
                else []
            )
        if name not in merged:
            yield name, theta0.to(device)
            continue
        with record_function("dots.vectors.synth.combine"):
            theta0 = theta0.to(device)
            need = SCRATCH_BUFFERS * block_entries(device, theta0.numel())
            if scratch.numel() < need:
                scratch = new_scratch(device, theta0.numel())
            out = combine_into(torch.empty_like(theta0), theta0, taus, scratch)
            del taus
        extra = task_vectors.extra_rows(name)
        if extra is not None:
            out = torch.cat([out, extra.to(device=device, dtype=out.dtype)], dim=0)
        yield name, out


class ResidentSynthesizer:
    """θ0 and every τ̃ held on one device, so that a swap is arithmetic only (docs/method.md §2).

    Same values as `synthesize` (same operations, same order), without disk reads and
    without allocating per call. τ̃ is held in `form` (`dots.vectors.forms`: dense float32,
    sparse float32 at positions, θ_i's values at positions (index), or the cache's compact
    bitmask: the same bits, fastest first). A call yields each tensor in an output buffer the
    next call overwrites (made at the first call that needs it), so consume (copy) each
    yielded tensor before calling again — `reload_weights`, `Engine.swap_weights` and
    `CheckpointWriter` all do; or, given `into` (name → live tensor), writes every tensor
    whose target has its dtype, shape and device straight into it a block at a time and
    yields only the others. Memory: θ0 in its dtype, the K τ̃ in their form (for bf16 at
    density 0.3, per parameter and source: dense 4, sparse 2.4, index 1.8, bitmask 0.725
    bytes), a float32 scratch of 4 blocks (2^20 entries each on
    CPU, up to 2^26 on CUDA), and the outputs used; `nbytes` says how much. `fused`: swaps
    through the fused pass (compiled and checked here), or not; None: where it is faster
    (`dots.vectors.fused.fused_wanted`).
    """

    def __init__(
        self,
        task_vectors: TaskVectors,
        device: str | torch.device | None = None,
        base: Checkpoint | None = None,
        form: str = "bitmask",
        fused: bool | None = None,
    ):
        if form not in BY_SPEED:
            raise DotsError(f"resident form must be one of {', '.join(BY_SPEED)}, got {form!r}")
        self.task_vectors = task_vectors
        self.form = form
        self.device = torch.device(device) if device is not None else default_device()
        base = base if base is not None else Checkpoint(task_vectors.base_path)
        merged = set(task_vectors.names)
        self.names = list(base.names)
        self.theta0: dict[str, torch.Tensor] = {}
        self.taus: dict[str, dict[str, ResidentTau]] = {}
        self.out: dict[str, torch.Tensor] = {}
        self.extra: dict[str, torch.Tensor] = {}
        largest = 0
        for name in self.names:
            theta0 = self.theta0[name] = base.get(name).to(self.device)
            if name not in merged:
                continue
            self.taus[name] = {
                k: to_form(task_vectors.compact(k, name).to(self.device), theta0, form) for k in task_vectors.sources
            }
            extra = task_vectors.extra_rows(name)
            if extra is not None:  # rows a source added to an embedding: constant
                self.extra[name] = extra.to(device=self.device, dtype=theta0.dtype)
            largest = max(largest, theta0.numel())
        self._scratch = new_scratch(self.device, largest)
        params = [(self.theta0[name], list(per.values())) for name, per in self.taus.items()]
        self._fused = prepare(self.device, form, params, partial(combine_into, scratch=self._scratch), fused)

    @property
    def fused(self) -> dict:
        """Whether swaps take the fused pass (`dots.vectors.fused`) and the seconds compiling it took."""
        return describe(self._fused)

    @property
    def nbytes(self) -> int:
        tensors = [*self.theta0.values(), *self.out.values(), *self.extra.values(), self._scratch]
        held = sum(t.numel() * t.element_size() for t in tensors)
        return held + sum(ct.nbytes for per in self.taus.values() for ct in per.values())

    def _shape(self, name: str) -> tuple[int, ...]:
        theta0, extra = self.theta0[name], self.extra.get(name)
        rows = theta0.shape[0] + (extra.shape[0] if extra is not None else 0)
        return (rows, *theta0.shape[1:]) if theta0.dim() else tuple(theta0.shape)

    def _output(self, name: str) -> torch.Tensor:
        out = self.out.get(name)
        if out is None:
            theta0 = self.theta0[name]
            out = self.out[name] = torch.empty(self._shape(name), dtype=theta0.dtype, device=self.device)
            if name in self.extra:
                out[theta0.shape[0] :].copy_(self.extra[name])
        return out

    def _writable(self, target: torch.Tensor, name: str) -> bool:
        theta0 = self.theta0[name]
        return (
            target.dtype == theta0.dtype
            and target.device == theta0.device
            and target.is_contiguous()
            and tuple(target.shape) == self._shape(name)
        )

    def __call__(
        self, coefficients: Coefficients, into: Mapping[str, torch.Tensor] | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        lambdas = check_coefficients(self.task_vectors, coefficients)
        for name in self.names:
            theta0 = self.theta0[name]
            target = into.get(name) if into is not None else None
            if target is not None and not self._writable(target, name):
                target = None  # another dtype or layout: yielded, the caller copies (and casts) it
            if name not in self.taus:
                if target is None:
                    yield name, theta0
                else:
                    target.copy_(theta0)
                continue
            out = target if target is not None else self._output(name)
            with record_function("dots.vectors.synth.combine"):
                taus = [(self.taus[name][k], lam) for k, lam in tensor_lambdas(lambdas, name)]
                combine_into(out, theta0, taus, self._scratch, self._fused)
            if target is None:
                yield name, out
            elif name in self.extra:
                target[theta0.shape[0] :].copy_(self.extra[name])


def synthesize_dict(
    task_vectors: TaskVectors,
    coefficients: Coefficients,
    device: str | torch.device | None = "cpu",
) -> dict[str, torch.Tensor]:
    """The whole merged model as a state dict (small models, tests)."""
    return dict(synthesize(task_vectors, coefficients, device))
