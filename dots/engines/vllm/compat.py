"""Every vLLM internal dots touches, each written once, with the releases it was checked on.

vLLM promises nothing about these: the reload metadata that tells the fast swap each
parameter's load-time layout, the loader it calls, the post-load processing it redoes,
vLLM-CPU's GEMM packing, the worker's model runner, the engine core's shutdown, the fields
of EngineArgs. No other module of dots touches them (`tests/test_vllm_compat.py` checks).

Two swap paths (`choose_path`): inside `TESTED` the fast one (θ0 + Σλτ̃ written straight into
the live parameters, `dots.engines.vllm.resident`); outside it the public one — the tensors
streamed to the worker's own `reload_weights(weights_iterator=…)` through `collective_rpc`, as
RL frameworks do — said in one line; where even that is missing, a one-line DotsError naming
the supported range. "Read on" below: the releases whose source was read for that access
(same module, name and signature in each); `TESTED`: where the engine tests passed
(docs/compatibility.md, scripts/vllm_versions.sh).
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any, Callable, Iterable

import torch

from dots.engines.vllm.env import import_vllm
from dots.errors import DotsError

__all__ = ["on_cpu_platform", "version_tuple"]

log = logging.getLogger(__name__)

# [lowest, below): engine tests passed on 0.27.0, 0.27.1, 0.29.0, 0.30.0 and 0.32.0 (fast path)
TESTED = ("0.27.0", "0.33")
READ_ON = "0.20.0, 0.26.0, 0.27.1, 0.29.0, 0.32.0"  # releases whose source was read for each access below


def version_tuple(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a release text, for comparing: "0.32.0+cpu" → (0, 32, 0), "0.33" → (0, 33)."""
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def vllm_version() -> str:
    """The installed vLLM's version (vllm-cpu reports vLLM's own)."""
    vllm = import_vllm()

    return str(getattr(vllm, "__version__", "0"))


def in_tested_range(version: str) -> bool:
    """`version` lies in [TESTED[0], TESTED[1]), or is the candidate release that
    scripts/vllm_versions.sh is testing the fast path on (`DOTS_VLLM_CANDIDATE`)."""
    if os.environ.get("DOTS_VLLM_CANDIDATE") == version:
        return True
    lo, hi = (version_tuple(v) for v in TESTED)
    return lo <= version_tuple(version) < hi


def supported_range() -> str:
    return f"vllm>={TESTED[0]},<{TESTED[1]}"


def choose_path(version: str, fast: bool, public: bool) -> str:
    """The swap path for this vLLM: "fast" inside the tested range (and its internals import),
    "public" outside it when the workers have `reload_weights(weights_iterator=…)` (one line
    says so), else a DotsError naming the supported range."""
    if fast and in_tested_range(version):
        return "fast"
    if public:
        log.warning(
            "vLLM %s is outside dots' tested range (%s): weight swaps use vLLM's public reload_weights "
            "path (slower; checked by the swap canary)",
            version,
            supported_range(),
        )
        return "public"
    raise DotsError(
        f"vLLM {version} has neither dots' fast swap nor a public reload_weights(weights_iterator=...): "
        f"install {supported_range()}"
    )


# --- the main process -------------------------------------------------------------------------


def engine_arg_names() -> set[str]:
    """The fields of vLLM's EngineArgs (what `vllm.LLM` accepts), imported without starting
    anything and without vLLM's import-time warnings. Read on 0.20.0–0.32.0."""
    import dataclasses
    import logging as _logging

    import_vllm("vllm.logger")  # (configures the "vllm" logger, which is then quieted)

    vllm_log = _logging.getLogger("vllm")
    level = vllm_log.level
    vllm_log.setLevel(_logging.ERROR)
    try:
        EngineArgs = import_vllm("vllm.engine.arg_utils").EngineArgs
    finally:
        vllm_log.setLevel(level)
    return {f.name for f in dataclasses.fields(EngineArgs)}


def check_worker_extensions() -> None:
    """Stop with one line where vLLM has no worker extensions (dots' swaps all run in them)."""
    if "worker_extension_cls" not in engine_arg_names():
        raise DotsError(
            f"vLLM {vllm_version()} has no worker extensions (worker_extension_cls): install {supported_range()}"
        )


def on_cpu_platform() -> bool:
    """vLLM runs on CPU (vllm-cpu). `vllm.platforms.current_platform`; read on 0.20.0–0.32.0."""
    current_platform = import_vllm("vllm.platforms").current_platform

    return bool(current_platform.is_cpu())


def shutdown(llm: Any) -> None:
    """End the engine core's processes now (`llm.llm_engine.engine_core.shutdown()`, V1 engine);
    read on 0.20.0–0.32.0. Nothing when it is already gone."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:
            core.shutdown()
        except Exception as exc:  # already gone
            log.debug("vLLM shutdown: %s", exc)


# --- inside a worker (self is vLLM's Worker with dots' extension mixed in) ---------------------


def worker_model(worker: Any) -> torch.nn.Module:
    """The worker's live model: `worker.model_runner.get_model()`; read on 0.20.0–0.32.0."""
    return worker.model_runner.get_model()


def worker_config(worker: Any) -> Any:
    """The worker's VllmConfig (`worker.vllm_config`); read on 0.20.0–0.32.0."""
    return worker.vllm_config


def tensor_parallel_size(config: Any) -> int:
    return int(config.parallel_config.tensor_parallel_size)


def started_on(config: Any) -> str:
    """The model directory the engine started on (`config.model_config.model`)."""
    return str(config.model_config.model)


def is_quantized(config: Any) -> bool:
    return getattr(config, "quant_config", None) is not None


def has_public_reload(worker: Any) -> bool:
    """The worker's model runner has `reload_weights(weights_iterator=…)` (the public path)."""
    reload = getattr(getattr(worker, "model_runner", None), "reload_weights", None)
    if reload is None or not hasattr(worker, "reload_weights"):
        return False
    try:
        return "weights_iterator" in inspect.signature(reload).parameters
    except (TypeError, ValueError):
        return False


def reload_weights(worker: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """The public path: vLLM's own loader takes the tensors (checkpoint naming), shards them,
    copies them into the live parameters and redoes the post-load processing. Read on 0.20.0–0.32.0."""
    worker.reload_weights(weights_iterator=weights)


def fast_path_available() -> bool:
    """The internals of the fast swap import (their presence; the range is `choose_path`'s)."""
    try:
        layerwise = import_vllm("vllm.model_executor.model_loader.reload.layerwise")
        found = (
            import_vllm("vllm.config").set_current_vllm_config,
            layerwise.LAYERWISE_INFO,
            layerwise._get_original_loader,
            import_vllm("vllm.model_executor.model_loader.reload.meta").to_meta_tensor,
            import_vllm("vllm.model_executor.model_loader.reload.sanitize").restore_layer_refs,
        )
    except (ImportError, AttributeError):
        return False
    return all(x is not None for x in found)


def layerwise_info(module: torch.nn.Module) -> Any:
    """vLLM's reload record of a module (its load-time parameters in `restore_metadata[0]`),
    or None: `model_loader.reload.layerwise.LAYERWISE_INFO`; read on 0.20.0–0.32.0."""
    LAYERWISE_INFO = import_vllm("vllm.model_executor.model_loader.reload.layerwise").LAYERWISE_INFO

    return LAYERWISE_INFO.get(module)


def load_time_layout(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{attribute: meta tensor in its load-time layout} of a module vLLM transformed at load."""
    info = layerwise_info(module)
    return info.restore_metadata[0] if info is not None else {}


def to_meta_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """`model_loader.reload.meta.to_meta_tensor` (the tensor on meta, loader attributes kept)."""
    to_meta = import_vllm("vllm.model_executor.model_loader.reload.meta").to_meta_tensor

    return to_meta(tensor)


def dress_as_loaded(meta: torch.Tensor, owner: torch.nn.Module, data: torch.Tensor) -> torch.Tensor:
    """`data` dressed as the load-time parameter `meta` (its class and loader attributes). After
    a `reload_weights` the metadata keeps the loader wrapper of vLLM's layerwise reload, which
    loads nothing outside a reload: unwrapped to the original loader
    (`reload.sanitize.restore_layer_refs`, `reload.layerwise._get_original_loader`)."""
    _get_original_loader = import_vllm("vllm.model_executor.model_loader.reload.layerwise")._get_original_loader
    restore_layer_refs = import_vllm("vllm.model_executor.model_loader.reload.sanitize").restore_layer_refs

    data.__class__ = meta.__class__
    data.__dict__ = meta.__dict__.copy()
    data = restore_layer_refs(data, owner)
    if "weight_loader" in data.__dict__ or "_weight_loader" in data.__dict__:  # vLLM's parameter classes
        data.weight_loader = _get_original_loader(data)  # type: ignore[attr-defined]
    return data


def load_weights(model: torch.nn.Module, config: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """vLLM's own loader of this model (`model.load_weights` under `set_current_vllm_config`)."""
    set_current_vllm_config = import_vllm("vllm.config").set_current_vllm_config

    with set_current_vllm_config(config), torch.no_grad():
        model.load_weights(weights)  # type: ignore[operator]


def has_quant_method(module: torch.nn.Module) -> bool:
    return getattr(module, "quant_method", None) is not None


def reprocess_after_loading(module: torch.nn.Module) -> None:
    """Run the module's post-load processing again: clear the
    `_already_called_process_weights_after_loading` guard, `quant_method.process_weights_after_loading`."""
    if hasattr(module, "_already_called_process_weights_after_loading"):
        delattr(module, "_already_called_process_weights_after_loading")
    module.quant_method.process_weights_after_loading(module)  # type: ignore[union-attr,operator]


def has_cpu_gemm(module: torch.nn.Module) -> bool:
    """vLLM-CPU gave this layer a GEMM handle built from its weight (`cpu_linear`)."""
    return hasattr(module, "cpu_linear")


def repack_cpu_gemm(module: torch.nn.Module) -> bool:
    """Rebuild a vLLM-CPU layer's GEMM handle from its weight now
    (`layers.utils.dispatch_cpu_unquantized_gemm`); False where this vLLM has none."""
    try:
        dispatch_cpu_unquantized_gemm = import_vllm("vllm.model_executor.layers.utils").dispatch_cpu_unquantized_gemm
    except (ImportError, AttributeError):
        return False
    dispatch_cpu_unquantized_gemm(module, remove_weight=False)
    return True


ACCESSES: dict[str, Callable[..., Any]] = {  # the list the docs and the grep test name
    "EngineArgs fields": engine_arg_names,
    "vllm.platforms.current_platform": on_cpu_platform,
    "llm_engine.engine_core.shutdown()": shutdown,
    "model_runner.get_model()": worker_model,
    "worker.vllm_config (+ parallel/model/quant config)": worker_config,
    "reload_weights(weights_iterator=…)": reload_weights,
    "reload.layerwise.LAYERWISE_INFO": layerwise_info,
    "reload.meta.to_meta_tensor": to_meta_tensor,
    "reload.layerwise._get_original_loader + reload.sanitize.restore_layer_refs": dress_as_loaded,
    "set_current_vllm_config + model.load_weights": load_weights,
    "_already_called_process_weights_after_loading + quant_method.process_weights_after_loading": (
        reprocess_after_loading
    ),
    "cpu_linear / dispatch_cpu_unquantized_gemm": repack_cpu_gemm,
}
