"""Build an engine from its typed options (`dots.options.engine.EngineOptions`).

`name: auto` picks vLLM when it can be imported, else transformers (`resolve_engine`, which
also checks `extra_args` against vLLM's own EngineArgs before any engine starts).
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any, Mapping

from dots.engines.base import Engine
from dots.errors import DotsError
from dots.options.engine import ENGINES, EngineOptions, engine_options

log = logging.getLogger(__name__)


def resolve_engine_name(name: str) -> str:
    """vllm or hf: `auto` is vLLM when it can be imported, else transformers."""
    if name not in ENGINES:
        raise DotsError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if name != "auto":
        return name
    from dots.engines.vllm.env import vllm_available

    chosen = "vllm" if vllm_available() else "hf"
    log.info("engine=auto: using %s", chosen)
    return chosen


def vllm_engine_args() -> set[str]:
    """The fields of vLLM's own EngineArgs (`dots.engines.vllm.compat.engine_arg_names`)."""
    from dots.engines.vllm.compat import engine_arg_names

    return engine_arg_names()


def resolve_engine(options: EngineOptions | Mapping[str, Any]) -> EngineOptions:
    """The options with `auto` resolved to the engine that will run, or a one-line DotsError:
    (vLLM) an `extra_args` key that vLLM's EngineArgs does not have — found before any engine starts.
    A mapping (conf/engine/*.yaml) is checked into EngineOptions first."""
    if not isinstance(options, EngineOptions):
        options = engine_options(options)
    name = resolve_engine_name(options.name)
    if name == "vllm" and options.extra_args:
        fields = vllm_engine_args()
        for key in options.extra_args:
            if key not in fields:
                close = difflib.get_close_matches(str(key), sorted(fields), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise DotsError(f"engine.extra_args.{key} is not an option of vLLM's EngineArgs{hint}")
    return options if name == options.name else options.with_(name=name)


def build_engine(
    options: EngineOptions | Mapping[str, Any],
    model: str | Path,
    task_vectors: Any = None,
    log_dir: str | Path | None = None,
) -> Engine:
    """The engine `options.name` names on `model`, with `task_vectors` for swap_coefficients;
    an engine with log lines of its own (vLLM) writes them into `log_dir` (see `engine.log`)."""
    options = resolve_engine(options)
    if options.name == "vllm":
        from dots.engines.vllm.engine import VLLMEngine

        return VLLMEngine(model, options, task_vectors=task_vectors, log_dir=log_dir)
    from dots.engines.hf import HFEngine

    return HFEngine(model, options, task_vectors=task_vectors)
