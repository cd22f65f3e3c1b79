"""Inference engines (vLLM, transformers) that swap weights in place."""
from dots.engines.base import Engine, PromptNLL

__all__ = ["Engine", "PromptNLL"]
