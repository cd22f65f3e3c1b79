"""Build an engine from its config group (conf/engine/{auto,vllm,hf}.yaml).

`name: auto` picks vLLM when it can be imported, else transformers. Each engine takes
the options it knows; an option neither engine knows is a typo and a DotsError.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Mapping

from dots.checks import check_choice, number_in, positive_int
from dots.engines.base import Engine
from dots.errors import DotsError
from dots.plain import to_plain

log = logging.getLogger(__name__)

ENGINES = ("auto", "vllm", "hf")


def _engine_class(name: str):
    if name == "vllm":
        from dots.engines.vllm.engine import VLLMEngine

        return VLLMEngine
    from dots.engines.hf import HFEngine

    return HFEngine


NOT_OPTIONS = ("self", "model", "task_vectors", "log_dir")  # given by the caller, not by the config


def _options(cls) -> set[str]:
    return {p for p in inspect.signature(cls.__init__).parameters if p not in NOT_OPTIONS}


ANNOUNCED: set[str] = set()  # the engines engine=auto has chosen in this process (and said so)


def resolve_engine_name(name: str) -> str:
    if name not in ENGINES:
        raise DotsError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if name != "auto":
        return name
    from dots.engines.vllm.env import vllm_available

    chosen = "vllm" if vllm_available() else "hf"
    if chosen not in ANNOUNCED:  # the plan and the engine both resolve it: said once
        ANNOUNCED.add(chosen)
        log.info("engine=auto: using %s", chosen)
    return chosen


def vllm_engine_args() -> set[str]:
    """The fields of vLLM's own EngineArgs (`dots.engines.vllm.compat.engine_arg_names`)."""
    from dots.engines.vllm.compat import engine_arg_names

    return engine_arg_names()


def check_engine_config(cfg: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(engine name, its keyword arguments) from the engine config, or a one-line DotsError:
    an unknown engine, an option neither engine knows, a bad synth_cache or resident_form, or (vLLM) an
    `extra_args` key that vLLM's EngineArgs does not have — found before any engine starts."""
    import difflib

    from dots.engines.hf import HFEngine
    from dots.vectors.forms import check_resident_form
    from dots.vectors.residency import check_synth_cache

    options = dict(to_plain(cfg))
    name = resolve_engine_name(str(options.pop("name", "auto")))
    known = _options(HFEngine)
    try:
        from dots.engines.vllm.engine import VLLMEngine

        known |= _options(VLLMEngine)
    except ImportError:
        pass
    unknown = sorted(set(options) - known)
    if unknown:
        raise DotsError(f"unknown engine option(s) {unknown}; known: {sorted(known)}")
    check_synth_cache(str(options.get("synth_cache", "disk")))
    check_resident_form(str(options.get("resident_form", "auto")))
    check_engine_numbers(options)
    check_choice(options.get("log", "file"), ("file", "terminal"), "engine.log")
    extra = options.get("extra_args") or {}
    if not isinstance(extra, Mapping):
        raise DotsError(f"engine.extra_args must be a mapping of vLLM keyword arguments, got {extra!r}")
    if name == "vllm" and extra:
        fields = vllm_engine_args()
        for key in extra:
            if key not in fields:
                close = difflib.get_close_matches(str(key), sorted(fields), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise DotsError(f"engine.extra_args.{key} is not an option of vLLM's EngineArgs{hint}")
    accepted = _options(_engine_class(name))
    return name, {k: v for k, v in options.items() if k in accepted}


ENGINE_COUNTS = {"batch_size": 1, "nll_batch_size": 1, "seed": 0, "tensor_parallel_size": 1}
ENGINE_OPTIONAL_COUNTS = ("max_model_len", "max_num_seqs")


def check_engine_numbers(options: Mapping[str, Any]) -> None:
    """The engine's counts are whole numbers (>= 1; a seed >= 0), gpu_memory_utilization is in
    (0, 1], dtype and device are known: a bad one is one line now, not a failure once the
    engine starts mid-run."""
    for key, minimum in ENGINE_COUNTS.items():
        if key in options:
            positive_int(options[key], f"engine.{key}", minimum=minimum)
    for key in ENGINE_OPTIONAL_COUNTS:
        if options.get(key) is not None:
            positive_int(options[key], f"engine.{key}")
    if options.get("gpu_memory_utilization") is not None:
        number_in(options["gpu_memory_utilization"], "engine.gpu_memory_utilization", 0.0, 1.0, low_open=True)
    if options.get("dtype") is not None:
        from dots.engines.hf import _DTYPES

        check_choice(options["dtype"], [*_DTYPES, "float"], "engine.dtype")  # vLLM's "float" too
    if options.get("device") is not None:
        import torch

        try:
            torch.device(str(options["device"]))
        except RuntimeError:
            raise DotsError(
                f"engine.device must be a torch device (cpu, cuda, cuda:1, ...), got {options['device']!r}"
            ) from None


def build_engine(
    cfg: Mapping[str, Any], model: str | Path, task_vectors=None, log_dir: str | Path | None = None
) -> Engine:
    """The engine named by `cfg.name` on `model`, with `task_vectors` for swap_coefficients;
    an engine with log lines of its own (vLLM) writes them into `log_dir` (see `engine.log`)."""
    name, kwargs = check_engine_config(cfg)
    cls = _engine_class(name)
    if log_dir is not None and "log_dir" in inspect.signature(cls.__init__).parameters:
        kwargs["log_dir"] = log_dir
    return cls(model, task_vectors=task_vectors, **kwargs)
