"""Inference engines (vLLM, transformers) that swap weights in place."""

from typing import Any

from dots.engines.base import Engine

__all__ = ["Engine", "build_engine"]


def __getattr__(name: str) -> Any:
    if name == "build_engine":  # lazy: the factory imports torch/transformers/vllm on demand
        from dots.engines.factory import build_engine

        return build_engine
    raise AttributeError(name)
