"""Inference engines (vLLM, transformers) that swap weights in place."""
from dots.engines.base import Engine, PromptNLL, engine_perplexity, perplexity

__all__ = ["Engine", "PromptNLL", "perplexity", "engine_perplexity", "build_engine"]


def __getattr__(name: str):
    if name == "build_engine":  # lazy: the factory imports torch/transformers/vllm on demand
        from dots.engines.factory import build_engine

        return build_engine
    raise AttributeError(name)
