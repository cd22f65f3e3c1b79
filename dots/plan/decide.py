"""The plan: engine + resident τ̃ or one tensor at a time, per device, against what the devices
have free — `synth_cache` and the resident form of τ̃ chosen (the fastest that fits: dense,
sparse, index, bitmask; `dots.vectors.forms`), vLLM's share of a GPU, or one line saying why nothing fits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dots.errors import DotsError
from dots.io.safetensors import dtype_size
from dots.io.shapes import ModelShapes
from dots.options.engine import EngineOptions
from dots.runtime.devices import DeviceMemory
from dots.vectors.forms import BY_SPEED, check_resident_form, form_estimate
from dots.vectors.residency import (
    ENGINE_RESERVE,
    MARGIN,
    PROMPT_TOKENS,
    check_synth_cache,
    resident_bytes,
    sharded_resident_bytes,
    stream_bytes,
)

__all__ = ["EngineSetting", "MemoryPlan", "plan_memory", "size"]

VLLM_MAX_UTILIZATION = 0.9  # vLLM's own default share of a GPU


@dataclass(frozen=True)
class EngineSetting:
    """The engine config (conf/engine/*.yaml) and search options the plan depends on."""

    name: str  # vllm | hf
    device: str  # cuda | cpu
    tensor_parallel: int = 1
    dtype: torch.dtype | None = None  # weights and KV; None: the checkpoint's
    utilization: float | None = None  # vLLM's gpu_memory_utilization as configured
    max_model_len: int | None = None  # vLLM's; None: the model's max_position_embeddings
    sequences: int = 8  # sequences whose KV must fit at once (search.k; hf: batch_size)
    max_tokens: int = 1024  # generated tokens per sequence (search.max_tokens)
    synth_cache: str = "auto"
    resident_form: str = "auto"  # auto | dense | sparse | bitmask

    def __post_init__(self) -> None:
        check_synth_cache(self.synth_cache)
        check_resident_form(self.resident_form)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of the engine and of each way to hold τ̃, and the choice made."""

    shapes: ModelShapes
    setting: EngineSetting
    memory: DeviceMemory
    sources: int
    density: float
    dtype: torch.dtype  # the engine's weights and KV
    weights: int
    kv: int
    kv_tokens: int
    kv_note: str
    reserve: int
    tau: int  # the K τ̃ in the chosen resident form (bitmask when read from the cache); part of `resident`
    resident: int  # θ0 and τ̃ resident in the chosen form (bitmask when read from the cache)
    stream: int
    synth_cache: str  # memory | disk
    resident_form: str | None  # dense | sparse | bitmask; None: τ̃ read from the cache
    forms: dict[str, tuple[int, int]]  # each resident form: (its K τ̃, θ0 and τ̃ resident) in bytes
    utilization: float | None  # vLLM's gpu_memory_utilization to start with (None: not vLLM on a GPU)
    reason: str

    @property
    def engine(self) -> int:
        return self.weights + self.kv + self.reserve

    def engine_options(self, options: EngineOptions) -> EngineOptions:
        """The engine's options with the plan applied: synth_cache chosen, vLLM's share set."""
        share = options.gpu_memory_utilization
        if self.utilization is not None and share is None:
            share = round(self.utilization, 4)
        return options.with_(
            synth_cache=self.synth_cache,
            resident_form=self.resident_form or options.resident_form,
            gpu_memory_utilization=share,
        )


def size(nbytes: float) -> str:
    """A size in the unit that fits it (GB, MB or kB): a small model's plan reads 174.21 kB, not 0.00 GB."""
    unit, name = next(((u, n) for u, n in ((1e9, "GB"), (1e6, "MB")) if abs(nbytes) >= u), (1e3, "kB"))
    return f"{nbytes / unit:.2f} {name}"


def copies_outputs(setting: EngineSetting, shapes: ModelShapes, form: str | None) -> bool:
    """Whether the transformers engine's resident swap holds one output per merged tensor and
    copies it in: from the cache (form None), or when the engine's dtype differs from the
    checkpoint's; every resident form is written straight into the parameters otherwise."""
    recast = setting.dtype is not None and setting.dtype != next(iter(shapes.tensors.values())).dtype
    return recast or form is None


def plan_memory(
    shapes: ModelShapes,
    setting: EngineSetting,
    memory: DeviceMemory,
    sources: int,
    density: float,
    tau_bytes: int | None = None,
) -> MemoryPlan:
    """The plan for `sources` task vectors of `shapes` at `density` beside `setting`'s engine on
    devices with `memory`; `tau_bytes` (all sources) when the cache exists, else estimated.
    A DotsError (one line, the numbers) when the requested synth_cache cannot fit."""
    tp = max(1, setting.tensor_parallel)
    dtype = setting.dtype or next(iter(shapes.tensors.values())).dtype
    weights = sum(i.numel * dtype_size(dtype) for i in shapes.tensors.values())
    weights = (weights + sum(shapes.extra_bytes(n) for n in shapes.extra_rows)) // tp
    per_token = shapes.kv_bytes_per_token(dtype, tp)
    seq = PROMPT_TOKENS + setting.max_tokens
    if setting.name == "vllm":
        limit = setting.max_model_len or shapes.max_position or seq
        tokens = max(limit, setting.sequences * min(seq, limit))
        note = f"max(max_model_len {limit}, k={setting.sequences} × {min(seq, limit)})"
    else:
        tokens = setting.sequences * seq
        note = f"batch_size {setting.sequences} × {seq}"
    kv = tokens * per_token
    itemsize = dtype_size(shapes.source_dtype)
    extra = {n: shapes.extra_bytes(n) for n in shapes.extra_rows}
    forms: dict[str, tuple[int, int]] = {}
    tau_of: dict[str, dict[str, int]] = {}
    for form in BY_SPEED:
        tau_of[form] = {
            n: sources * form_estimate(shapes.tensors[n].numel, density, itemsize, form) for n in shapes.merged
        }
        tau = tau_bytes if tau_bytes is not None and form == "bitmask" else sum(tau_of[form].values())
        if setting.name == "vllm":
            held = sharded_resident_bytes(shapes.tensors, shapes.merged, extra, tau, setting.device, tp)
        else:
            copied = copies_outputs(setting, shapes, form)
            held = resident_bytes(shapes.tensors, shapes.merged, extra, tau, setting.device, copied)
        forms[form] = (tau, held)
    stream = stream_bytes(shapes.tensors, shapes.merged, extra, tau_of["bitmask"], setting.device)
    reserve = ENGINE_RESERVE.get(setting.device, ENGINE_RESERVE["cuda"])
    choice, chosen, utilization, reason = _decide(setting, memory, weights + kv + reserve, forms, stream)
    tau, resident = forms[chosen or "bitmask"]
    return MemoryPlan(
        shapes, setting, memory, sources, density, dtype, weights, kv, tokens, note, reserve, tau, resident, stream,
        choice, chosen, forms, utilization, reason,
    )  # fmt: skip


def _candidates(setting: EngineSetting) -> list[tuple[str, str | None]]:
    """(synth_cache, resident form) in the order tried: the faster first, from the cache last."""
    forms = list(BY_SPEED) if setting.resident_form == "auto" else [setting.resident_form]
    if setting.synth_cache == "disk":
        if setting.resident_form != "auto":
            raise DotsError(
                f"resident_form={setting.resident_form} holds τ̃ resident, synth_cache=disk reads it from the "
                "cache at every swap: use synth_cache=memory or auto"
            )
        return [("disk", None)]
    resident: list[tuple[str, str | None]] = [("memory", f) for f in forms]
    return (
        resident + [("disk", None)] if setting.synth_cache == "auto" and setting.resident_form == "auto" else resident
    )


def _decide(
    setting: EngineSetting, memory: DeviceMemory, engine: int, forms: dict[str, tuple[int, int]], stream: int
) -> tuple[str, str | None, float | None, str]:
    """(synth_cache, resident form or None, vLLM utilization or None, why) — or a one-line DotsError."""
    vllm_gpu = setting.name == "vllm" and setting.device == "cuda"
    workers = max(1, setting.tensor_parallel) if setting.device == "cpu" else 1  # they share the host
    share = setting.utilization * memory.total if vllm_gpu and setting.utilization is not None else None
    if share is not None and share < engine:
        raise DotsError(
            f"memory plan: vLLM's share (gpu_memory_utilization {setting.utilization} × {memory.total / 1e9:.1f} GB "
            f"= {size(share)}) is less than its weights + minimum KV cache + reserve ({size(engine)})"
        )

    def need(candidate: tuple[str, str | None]) -> int:
        cache, form = candidate
        return forms[form][1] if cache == "memory" and form is not None else stream

    def room(candidate: tuple[str, str | None]) -> float:  # bytes left over on a device (< 0: does not fit)
        if share is not None:
            return memory.free - share - need(candidate) - MARGIN
        return memory.free - workers * (engine + need(candidate)) - MARGIN

    wanted = _candidates(setting)
    fitting = [c for c in wanted if room(c) >= 0]
    smallest = forms["bitmask"][1]
    if not fitting:
        last = wanted[-1]  # the smallest need: what would have had to fit
        label = "τ̃ from the cache" if last[0] == "disk" else f"τ̃ resident ({last[1]} form)"
        engine_part = f"engine {size(engine)}" if share is None else f"vLLM's share {size(share)}"
        other = f" (resident: {size(smallest)})" if last[0] == "disk" else ""
        per = f", × {workers} workers" if workers > 1 else ""
        total = share + need(last) if share is not None else workers * (engine + need(last))
        if setting.resident_form != "auto":
            hint = "use resident_form=auto (the fastest form that fits)"
        elif setting.synth_cache == "memory":
            hint = "use synth_cache=auto or disk"
        else:
            hint = "use larger or more devices"
        raise DotsError(
            f"memory plan: does not fit on {setting.device}: {engine_part} + {label} {size(need(last))}"
            f"{other}{per} + margin {size(MARGIN)} = {size(total + MARGIN)} > "
            f"{memory.free / 1e9:.1f} GB free per device; {hint} (python -m dots.plan prints the whole plan)"
        )
    choice = fitting[0]
    cache, form = choice
    utilization = None
    if vllm_gpu:
        utilization = setting.utilization
        if utilization is None:
            utilization = min(VLLM_MAX_UTILIZATION, (memory.free - need(choice) - MARGIN) / memory.total)
    beside = f"beside the engine's {size(engine)}" if share is None else f"beside vLLM's {size(share)}"
    if cache == "memory" and setting.resident_form != "auto":
        reason = f"as configured ({size(need(choice))} {beside} fits in {memory.free / 1e9:.1f} GB)"
    elif cache == "memory":
        faster = [f for f in BY_SPEED[: BY_SPEED.index(str(form))]]
        slower = "; ".join(f"{f} would need {size(forms[f][1])}" for f in faster) if faster else "the fastest form"
        reason = (
            f"θ0 and τ̃ resident in the {form} form ({size(need(choice))}) fit {beside} in "
            f"{memory.free / 1e9:.1f} GB ({slower}); swaps are arithmetic only"
        )
    elif setting.synth_cache != "auto":
        reason = f"as configured ({size(need(choice))} {beside} fits in {memory.free / 1e9:.1f} GB)"
    else:
        reason = (
            f"θ0 and τ̃ resident would need {size(smallest)} (bitmask form, the smallest) {beside}, "
            f"{memory.free / 1e9:.1f} GB free; read from the cache at every swap ({size(stream)} at a time)"
        )
    return cache, form, utilization, reason
