"""Build an engine from its config group (conf/engine/{auto,vllm,hf}.yaml).

`name: auto` picks vLLM when it can be imported, else transformers. Each engine takes
the options it knows; an option neither engine knows is a typo and a DotsError.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Mapping

from dots.engines.base import Engine
from dots.errors import DotsError
from dots.plain import to_plain

log = logging.getLogger(__name__)

ENGINES = ("auto", "vllm", "hf")


def _engine_class(name: str):
    if name == "vllm":
        from dots.engines.vllm import VLLMEngine

        return VLLMEngine
    from dots.engines.hf import HFEngine

    return HFEngine


def _options(cls) -> set[str]:
    return {p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "model", "task_vectors")}


def resolve_engine_name(name: str) -> str:
    if name not in ENGINES:
        raise DotsError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if name != "auto":
        return name
    from dots.engines.vllm_env import vllm_available

    chosen = "vllm" if vllm_available() else "hf"
    log.info("engine=auto: using %s", chosen)
    return chosen


def build_engine(cfg: Mapping[str, Any], model: str | Path, task_vectors=None) -> Engine:
    """The engine named by `cfg.name` on `model`, with `task_vectors` for swap_coefficients."""
    options = dict(to_plain(cfg))
    name = resolve_engine_name(str(options.pop("name", "auto")))
    from dots.engines.hf import HFEngine

    known = _options(HFEngine)
    try:
        from dots.engines.vllm import VLLMEngine

        known |= _options(VLLMEngine)
    except ImportError:
        pass
    unknown = sorted(set(options) - known)
    if unknown:
        raise DotsError(f"unknown engine option(s) {unknown}; known: {sorted(known)}")
    cls = _engine_class(name)
    accepted = _options(cls)
    kwargs = {k: v for k, v in options.items() if k in accepted}
    return cls(model, task_vectors=task_vectors, **kwargs)
