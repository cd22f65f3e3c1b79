"""vLLM worker extension: in-place weight swaps built inside every worker process.

Loaded by vLLM through `LLM(worker_extension_cls="dots.engines.vllm.worker.DotsWorkerExtension")`
and mixed into each worker; the engine calls these methods with `llm.collective_rpc`.
Only small messages cross processes (a task-vector cache spec once, then coefficients
or a checkpoint path). With τ̃ read from the cache (`synth_cache: disk`), each worker builds
the full tensors itself (θ0 + Σλτ̃ from disk, on its own device) and hands them to its
`reload_weights`, whose model loader shards them for tensor parallelism. With τ̃ resident
(`memory`), each worker holds θ0 and τ̃ of its own (sharded, fused) parameters and writes
θ0 + Σλτ̃ straight into them (`dots.engines.vllm.resident`); where that layout is not
covered it holds the whole model's (`dots.vectors.synth.ResidentSynthesizer`) and reloads.
The vLLM internals it reaches go through `dots.engines.vllm.compat`. With `dots_use_public_path`
(vLLM outside the tested range, or a swap canary that failed on the fast path) every swap is a
`reload_weights`, vLLM's public path.
This module must not import vLLM at top level: the engine imports it only by name.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Mapping

from dots.engines.vllm import compat

if TYPE_CHECKING:
    from dots.vectors.coefficients import Coefficients

log = logging.getLogger(__name__)


class DotsWorkerExtension:
    """Methods added to vLLM's Worker (self is the worker: self.device, self.reload_weights)."""

    _dots_task_vectors: Any = None
    _dots_resident: Any = None  # ResidentSynthesizer: the whole model, checkpoint layout
    _dots_sharded: Any = None  # ShardedResident: this worker's parameters, their layout
    _dots_resident_note: str = ""  # why the sharded layout was not used
    _dots_weights_changed: bool = False  # any reload since the engine started
    _dots_not_base: bool = True  # parameters the sharded swap does not write may differ from θ0
    _dots_public: bool = False  # every swap through vLLM's public reload_weights

    def _dots_device(self):
        import torch

        device = getattr(self, "device", None)
        return torch.device(device) if device is not None else torch.device("cpu")

    def dots_worker_info(self) -> dict:
        """Where this worker runs: pid, device, tensor-parallel rank."""
        rank = getattr(self, "rank", None)
        return {"pid": os.getpid(), "device": str(self._dots_device()), "rank": rank}

    def dots_swap_paths(self) -> dict:
        """Which swap paths this worker's vLLM has: the fast one's internals, the public reload."""
        return {
            "version": compat.vllm_version(),
            "fast": compat.fast_path_available(),
            "public": compat.has_public_reload(self),
        }

    def dots_use_public_path(self) -> None:
        """From now on every swap is a `reload_weights` (the sharded resident τ̃ is dropped;
        set the task vectors again to hold the whole model's instead)."""
        self._dots_public = True
        self._dots_sharded = None

    def dots_set_task_vectors(
        self, spec: Mapping | None, synth_cache: str = "auto", layout: str = "parameters", resident_form: str = "auto"
    ) -> int:
        """Open the τ̃ cache described by `TaskVectors.spec()` (kept open for later swaps);
        with synth_cache "memory" (or "auto" when they fit in the device's free memory now),
        load θ0 and τ̃ onto this worker's device now, τ̃ in `resident_form` (auto: the fastest
        that fits): in its parameters' layout, or the whole model in the checkpoint's with
        layout "checkpoint" (benchmarks: the path before). Returns the bytes held resident."""
        self._dots_task_vectors = self._dots_resident = self._dots_sharded = None
        self._dots_resident_note = ""
        if spec is None:
            return 0
        from dots.runtime.allocator import reuse_freed_memory
        from dots.vectors.cache import TaskVectors
        from dots.vectors.residency import resolve_resident

        reuse_freed_memory()  # every swap allocates model-sized tensors again

        self._dots_task_vectors = TaskVectors.from_spec(spec)
        config = compat.worker_config(self)
        shards = compat.tensor_parallel_size(config)
        cache, form = resolve_resident(synth_cache, resident_form, self._dots_task_vectors, self._dots_device(), shards)
        form = form if form != "auto" else "bitmask"
        if cache == "memory":
            from dots.engines.vllm.resident import ShardedResident
            from dots.engines.vllm.units import Unsupported
            from dots.vectors.synth import ResidentSynthesizer

            try:
                if layout == "checkpoint":
                    raise Unsupported("the checkpoint layout was asked for")
                if self._dots_public:
                    raise Unsupported("swaps use vLLM's public reload_weights path")
                model = compat.worker_model(self)
                self._dots_sharded = ShardedResident(
                    model, config, self._dots_task_vectors, self._dots_device(), form=form
                )
                started_on = os.path.realpath(compat.started_on(config))
                base = os.path.realpath(str(self._dots_task_vectors.base_path))
                self._dots_not_base = self._dots_weights_changed or started_on != base
                return self._dots_sharded.nbytes
            except Unsupported as exc:
                self._dots_resident_note = str(exc)
                log.warning("τ̃ resident for the whole model in every worker: %s", exc)
            except Exception as exc:  # a model whose loading this layout does not follow: the path before
                self._dots_resident_note = f"{type(exc).__name__}: {exc}"
                log.warning("τ̃ resident for the whole model in every worker (parameters' layout failed)", exc_info=True)
            self._dots_resident = ResidentSynthesizer(self._dots_task_vectors, device=self._dots_device(), form=form)
            return self._dots_resident.nbytes
        return 0

    def dots_resident_info(self) -> dict:
        """What this worker holds for swaps: layout "parameters" (its own shards), "checkpoint"
        (the whole model) or None (read from the cache), the resident form of τ̃, bytes, kept
        entries per source, and why the parameters' layout was not used."""
        info: dict[str, Any] = {"rank": getattr(self, "rank", None), "layout": None, "nbytes": 0, "note": ""}
        info["form"] = None
        if self._dots_sharded is not None:
            sharded = self._dots_sharded
            info.update(layout="parameters", nbytes=sharded.nbytes, kept=sharded.kept, form=sharded.form)
            import torch

            info.update(last_swap=sharded.last_swap, set_up_s=sharded.set_up_s, torch_threads=torch.get_num_threads())
            info.update(sharded.fused)
        elif self._dots_resident is not None:
            resident = self._dots_resident
            info.update(layout="checkpoint", nbytes=resident.nbytes, note=self._dots_resident_note, form=resident.form)
            info.update(resident.fused)
        return info

    def dots_check_resident_bits(self, coefficients: Mapping[str, float]) -> dict:
        """Tests: the sharded resident values of every written parameter against what vLLM's own
        loader makes of the streamed checkpoint-layout synthesis (`synthesize`), byte for byte.
        Returns how many parameters were compared and the names of those that differ."""
        import torch

        from dots.engines.vllm.units import place
        from dots.vectors.synth import synthesize

        sharded = self._dots_sharded
        if sharded is None:
            raise RuntimeError("dots_check_resident_bits needs τ̃ resident in the parameters' layout")
        units = [r.unit for r in sharded.params]
        stream = synthesize(self._dots_task_vectors, coefficients, device="cpu")
        reference = place(sharded.model, units, stream, sharded.config)

        def raw(t: torch.Tensor) -> torch.Tensor:
            return t.detach().contiguous().reshape(-1).view(torch.uint8)

        differ = [
            unit.name
            for (unit, ours), ref in zip(sharded.values(coefficients), reference)
            if ref is None or ours.dtype != ref.dtype or not torch.equal(raw(ours), raw(ref))
        ]
        return {"compared": len(units), "differ": differ}

    def _dots_reload(self, weights) -> float:
        from torch.profiler import record_function

        loaded: set[str] = set()

        def tracked():
            for name, tensor in weights:
                loaded.add(name)
                yield name, tensor

        start = time.perf_counter()
        self._dots_weights_changed = self._dots_not_base = True
        with record_function("dots.vllm.reload_weights"):  # includes the synthesis it consumes
            compat.reload_weights(self, tracked())
            self._dots_refresh_tied_cpu_gemms(loaded)
        from dots.runtime.timing import wait_for

        wait_for(self._dots_device())  # the seconds until the device has the weights (#38)
        return time.perf_counter() - start

    def _dots_refresh_tied_cpu_gemms(self, loaded: set[str]) -> list[str]:
        """vLLM-CPU gives each layer that multiplies by a weight a GEMM handle built from it at
        load time (`cpu_linear`; oneDNN reorders the weight into its own packed copy on
        AVX-512-BF16 machines). A tied `lm_head` receives no tensor of its own on reload, so
        its handle would keep multiplying by the first weights while the embedding it shares
        them with is updated. Rebuild the handle of every layer that shares its weight's
        storage with another and got no tensor named after it (`loaded`: the checkpoint names
        just reloaded; the reload rebuilt the others). Returns the rebuilt layers' names."""
        import torch

        if self._dots_device().type != "cpu":
            return []
        model = compat.worker_model(self)
        by_storage: dict[int, list[tuple[str, torch.nn.Module]]] = {}
        for name, module in model.named_modules():
            weight = getattr(module, "weight", None)
            if compat.has_cpu_gemm(module) and isinstance(weight, torch.Tensor) and weight.numel() > 0:
                by_storage.setdefault(weight.untyped_storage().data_ptr(), []).append((name, module))
        stale = [
            (name, module)
            for group in by_storage.values()
            if len(group) > 1
            for name, module in group
            if f"{name}.weight" not in loaded
        ]
        return [name for name, module in stale if compat.repack_cpu_gemm(module)]

    def dots_swap_coefficients(self, coefficients: Coefficients) -> float:
        """Reload θ0 + Σ λ_i τ̃_i (docs/method.md §2); returns the seconds spent in this worker."""
        if self._dots_task_vectors is None:
            raise RuntimeError("dots_swap_coefficients before dots_set_task_vectors")
        from dots.vectors.synth import synthesize

        if self._dots_sharded is not None:
            start = time.perf_counter()
            if self._dots_not_base:  # once: what the sharded swap does not write back to θ0
                from dots.runtime.allocator import freeing_as_it_goes

                at_base = dict.fromkeys(self._dots_sharded.sources, 0.0)
                with freeing_as_it_goes():
                    self._dots_reload(synthesize(self._dots_task_vectors, at_base))
                self._dots_not_base = False
            from torch.profiler import record_function

            with record_function("dots.vllm.sharded_swap"):
                self._dots_sharded.swap(coefficients)
            self._dots_weights_changed = True
            return time.perf_counter() - start
        if self._dots_resident is not None:
            return self._dots_reload(self._dots_resident(coefficients))
        return self._dots_reload(synthesize(self._dots_task_vectors, coefficients, device=self._dots_device()))

    def dots_swap_public(self, coefficients: Coefficients) -> float:
        """θ0 + Σ λ_i τ̃_i streamed from the cache to vLLM's public `reload_weights` whatever the
        worker holds (the swap canary compares it with the fast path)."""
        if self._dots_task_vectors is None:
            raise RuntimeError("dots_swap_public before dots_set_task_vectors")
        from dots.vectors.synth import synthesize

        return self._dots_reload(synthesize(self._dots_task_vectors, coefficients, device=self._dots_device()))

    def dots_swap_checkpoint(self, path: str) -> float:
        """Reload every tensor of a saved checkpoint (same architecture and shapes)."""
        from dots.io.checkpoint import Checkpoint
        from dots.runtime.allocator import freeing_as_it_goes

        ckpt = Checkpoint(path)
        device = self._dots_device()
        with freeing_as_it_goes():  # a one-off (selection): what it frees is not kept for swaps
            return self._dots_reload((name, t.to(device)) for name, t in ckpt.tensors())

    def dots_parameter_checksum(self) -> float:
        """Σ of all live parameters in float64 (tests: did the weights change?)."""

        model = compat.worker_model(self)
        return float(sum(p.detach().double().sum().item() for p in model.parameters()))
