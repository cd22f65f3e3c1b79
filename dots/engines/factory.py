"""Build an engine from its typed options (`dots.options.engine.EngineOptions`).

`name: auto` picks vLLM when it can be imported, else transformers (`resolve_engine`, which
also checks `extra_args` against vLLM's own EngineArgs before any engine starts).
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from dots.engines.base import Engine
from dots.errors import DotsError
from dots.options.engine import ENGINE_NAMES, EngineOptions, engine_options
from dots.registry import Registry, unknown

__all__ = ["ENGINES", "build_engine", "resolve_engine", "resolve_engine_name"]

log = logging.getLogger(__name__)

# an engine: a loader of its class, so that vLLM is imported only when it is chosen (typed
# `type[Engine]`: mypy checks that each class provides the whole protocol). Its names are the ones
# EngineOptions accepts (dots.options.engine.ENGINE_NAMES; tests/test_registry.py checks they agree).
ENGINES: Registry[Callable[[], type[Engine]]] = Registry("engine")


@ENGINES.register("vllm")
def _vllm() -> type[Engine]:
    from dots.engines.vllm.engine import VLLMEngine

    return VLLMEngine


@ENGINES.register("hf")
def _hf() -> type[Engine]:
    from dots.engines.hf import HFEngine

    return HFEngine


ANNOUNCED: set[str] = set()  # the engines engine=auto has chosen in this process (and said so)


def resolve_engine_name(name: str) -> str:
    """vllm or hf: `auto` is vLLM when it can be imported, else transformers."""
    if name not in ENGINE_NAMES:
        raise unknown("engine", name, ENGINE_NAMES)
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
    engine_class: Any = ENGINES.lookup(options.name)()
    if options.name == "vllm":
        return engine_class(model, options, task_vectors=task_vectors, log_dir=log_dir)
    return engine_class(model, options, task_vectors=task_vectors)
