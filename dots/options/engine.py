"""The engine's options (conf/engine/{auto,hf,vllm}.yaml) as one typed, frozen object.

Every value is checked when the object is made (`EngineOptions.__post_init__`), so an engine,
the memory plan and the evaluation take it without checking again. Which engine `auto` means and
whether `extra_args` are vLLM's own is decided by the engines (`dots.engines.factory.resolve_engine`),
which import vLLM; everything else is decided here. Defaults are conf/engine/auto.yaml's
(tests/test_option_defaults.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from dots.checks import check_choice, number_in, positive_int
from dots.errors import DotsError
from dots.options.typed import from_section
from dots.registry import unknown
from dots.vectors.forms import check_resident_form
from dots.vectors.residency import check_synth_cache

__all__ = ["DTYPES", "ENGINE_NAMES", "EngineOptions", "engine_options"]

ENGINE_NAMES = ("auto", "vllm", "hf")
# engine.dtype names → the torch dtype's attribute name ("auto": the checkpoint's own)
DTYPES: dict[str, str] = {
    "auto": "auto",
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
VLLM_ONLY_DTYPES = ("float",)  # vLLM's own name for float32
LOG_CHOICES = ("file", "terminal")  # file: <run dir>/vllm.log (when the engine is given a log_dir)


def _flag(value: Any, what: str, optional: bool = False) -> bool | None:
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise DotsError(f"{what} must be true or false{' or null' if optional else ''}, got {value!r}")
    return value


@dataclass(frozen=True)
class EngineOptions:
    """conf/engine/*.yaml: each engine takes the options it knows (the transformers engine:
    device, batch sizes; vLLM: tensor parallelism, its share of memory, `extra_args`)."""

    name: str = "auto"  # auto | vllm | hf
    dtype: str = "auto"
    seed: int = 0
    synth_cache: str = "auto"  # auto | memory | disk
    resident_form: str = "auto"  # auto | dense | sparse | index | bitmask
    # vLLM
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    enforce_eager: bool = False
    max_num_seqs: int | None = None
    enable_prefix_caching: bool | None = None
    extra_args: Mapping[str, Any] = field(default_factory=dict)
    # transformers
    device: str | None = None
    batch_size: int = 16
    nll_batch_size: int = 4
    log: str = "file"  # file | terminal

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if self.name not in ENGINE_NAMES:
            raise unknown("engine", self.name, ENGINE_NAMES)
        put("synth_cache", check_synth_cache(str(self.synth_cache)))
        put("resident_form", check_resident_form(str(self.resident_form)))
        put("seed", positive_int(self.seed, "engine.seed", minimum=0))
        put("tensor_parallel_size", positive_int(self.tensor_parallel_size, "engine.tensor_parallel_size"))
        put("batch_size", positive_int(self.batch_size, "engine.batch_size"))
        put("nll_batch_size", positive_int(self.nll_batch_size, "engine.nll_batch_size"))
        for key in ("max_model_len", "max_num_seqs"):
            if getattr(self, key) is not None:
                put(key, positive_int(getattr(self, key), f"engine.{key}"))
        if self.gpu_memory_utilization is not None:
            share = number_in(self.gpu_memory_utilization, "engine.gpu_memory_utilization", 0.0, 1.0, low_open=True)
            put("gpu_memory_utilization", share)
        put("dtype", check_choice(self.dtype, [*DTYPES, *VLLM_ONLY_DTYPES], "engine.dtype"))
        put("enforce_eager", _flag(self.enforce_eager, "engine.enforce_eager"))
        put("enable_prefix_caching", _flag(self.enable_prefix_caching, "engine.enable_prefix_caching", True))
        put("log", check_choice(self.log, LOG_CHOICES, "engine.log"))
        if not isinstance(self.extra_args, Mapping):
            raise DotsError(f"engine.extra_args must be a mapping of vLLM keyword arguments, got {self.extra_args!r}")
        put("extra_args", dict(self.extra_args))
        if self.device is not None:
            put("device", _check_device(self.device))

    def with_(self, **changes: Any) -> EngineOptions:
        """These options with `changes` (checked again)."""
        return replace(self, **changes)


def _check_device(device: Any) -> str:
    import torch

    try:
        torch.device(str(device))
    except RuntimeError:
        raise DotsError(f"engine.device must be a torch device (cpu, cuda, cuda:1, ...), got {device!r}") from None
    return str(device)


def engine_options(section: Any) -> EngineOptions:
    """conf/engine/*.yaml (a DictConfig or mapping) as EngineOptions, or a one-line DotsError."""
    return from_section(EngineOptions, section, "engine")
