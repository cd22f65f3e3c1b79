"""The memory plan's view of an engine config (conf/engine/*.yaml + search.k, max_tokens),
and the plan of a composed search config (`python -m dots.plan`, the search's memory_plan)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from dots.io.shapes import ModelShapes
from dots.plan.decide import EngineSetting, MemoryPlan, plan_memory
from dots.runtime import devices


def engine_setting(
    engine_cfg: Mapping[str, Any], search_cfg: Mapping[str, Any], device: str | None = None
) -> EngineSetting:
    """The plan's view of conf/engine/*.yaml (+ search.k, search.max_tokens); `device`
    overrides where the engine would run (cuda when torch sees a GPU, else cpu)."""
    from dots.engines.factory import resolve_engine_name
    from dots.engines.hf import resolve_dtype

    name = resolve_engine_name(str(engine_cfg.get("name", "auto")))
    if device is None and name == "vllm":
        from dots.engines.vllm.compat import on_cpu_platform

        device = "cpu" if on_cpu_platform() else "cuda"
    elif device is None:
        configured = engine_cfg.get("device")
        device = torch.device(configured).type if configured else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype(engine_cfg.get("dtype") or "auto")
    vllm = name == "vllm"
    return EngineSetting(
        name=name,
        device=device,
        tensor_parallel=int(engine_cfg.get("tensor_parallel_size") or 1) if vllm else 1,
        dtype=dtype if isinstance(dtype, torch.dtype) else None,
        utilization=engine_cfg.get("gpu_memory_utilization") if vllm else None,
        max_model_len=engine_cfg.get("max_model_len") if vllm else None,
        sequences=int(search_cfg.get("k", 8)) if vllm else int(engine_cfg.get("batch_size") or 16),
        max_tokens=int(search_cfg.get("max_tokens") or 1024),
        synth_cache=str(engine_cfg.get("synth_cache") or "auto"),
        resident_form=str(engine_cfg.get("resident_form") or "auto"),
    )


def plan_search(
    cfg: Any, shapes: ModelShapes, memory: devices.DeviceMemory | None = None, device: str | None = None
) -> MemoryPlan:
    """The plan of a composed search config (conf/search.yaml) for a model of `shapes`:
    memory measured on the engine's devices unless given."""
    from dots.plain import to_plain

    engine = to_plain(cfg.engine)
    setting = engine_setting(engine, to_plain(cfg.search), device)
    if memory is None:
        memory = devices.device_memory(setting.device, setting.tensor_parallel)
    return plan_memory(shapes, setting, memory, len(cfg.backbone.sources), float(cfg.sparsify.density))
