"""The memory plan's view of an engine config (conf/engine/*.yaml + search.k, max_tokens),
and the plan of a composed search config (`python -m dots.plan`, the search's memory_plan)."""

from __future__ import annotations

import torch

from dots.io.shapes import ModelShapes
from dots.options.engine import EngineOptions
from dots.options.search import PlanOptions
from dots.plan.decide import EngineSetting, MemoryPlan, plan_memory
from dots.runtime import devices

__all__ = ["plan_search"]


def engine_setting(engine: EngineOptions, k: int, max_tokens: int, device: str | None = None) -> EngineSetting:
    """The plan's view of the engine's options (+ search.k, search.max_tokens); `device`
    overrides where the engine would run (cuda when torch sees a GPU, else cpu)."""
    from dots.engines.factory import resolve_engine_name
    from dots.engines.hf import resolve_dtype

    name = resolve_engine_name(engine.name)
    if device is None and name == "vllm":
        from dots.engines.vllm.compat import on_cpu_platform

        device = "cpu" if on_cpu_platform() else "cuda"
    elif device is None:
        configured = engine.device
        device = torch.device(configured).type if configured else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype(engine.dtype) if engine.dtype != "float" else torch.float32  # vLLM's name for float32
    vllm = name == "vllm"
    return EngineSetting(
        name=name,
        device=device,
        tensor_parallel=engine.tensor_parallel_size if vllm else 1,
        dtype=dtype if isinstance(dtype, torch.dtype) else None,
        utilization=engine.gpu_memory_utilization if vllm else None,
        max_model_len=engine.max_model_len if vllm else None,
        sequences=k if vllm else engine.batch_size,
        max_tokens=max_tokens,
        synth_cache=engine.synth_cache,
        resident_form=engine.resident_form,
    )


def plan_search(
    options: PlanOptions, shapes: ModelShapes, memory: devices.DeviceMemory | None = None, device: str | None = None
) -> MemoryPlan:
    """The plan of a search's options for a model of `shapes`: memory measured on the engine's
    devices unless given."""
    setting = engine_setting(options.engine, options.k, options.max_tokens, device)
    if memory is None:
        memory = devices.device_memory(setting.device, setting.tensor_parallel)
    return plan_memory(shapes, setting, memory, len(options.sources), options.sparsify.density)
