"""Where a parameter sits in a transformer: its module class, layer and kind.

Module classes follow DoTS Fig. 1c / Tab. 12 (attention, MLP, LayerNorm, embedding,
LM head); anything else (e.g. a vision tower, rotary buffers) is `other`.
"""

from __future__ import annotations

import re

MODULE_CLASSES = ("attention", "mlp", "norm", "embedding", "lm_head", "other")

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_EMBEDDING = ("embed_tokens", "wte", "word_embeddings", "embed_in", "wpe", "embed_positions")
_LM_HEAD = ("lm_head", "embed_out")
_NORM = ("norm", "ln_", "layernorm")
_ATTENTION = ("self_attn", "attention", "attn", "q_proj", "k_proj", "v_proj", "o_proj", "qkv")
_MLP = ("mlp", "feed_forward", "ffn", "gate_proj", "up_proj", "down_proj", "fc1", "fc2", "experts")


def layer_index(name: str) -> int | None:
    """The transformer block index in `...layers.<i>....`, None outside the blocks."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def module_class(name: str) -> str:
    """attention / mlp / norm / embedding / lm_head / other (norms inside attention, such
    as Qwen3's q_norm, count as norm)."""
    lowered = name.lower()
    parts = lowered.split(".")
    if any(p in _LM_HEAD for p in parts):
        return "lm_head"
    if any(p in _EMBEDDING for p in parts):
        return "embedding"
    if any(h in lowered for h in _NORM):
        return "norm"
    if any(h in lowered for h in _ATTENTION):
        return "attention"
    if any(h in lowered for h in _MLP):
        return "mlp"
    return "other"


def module_kind(name: str) -> str:
    """The name without the model prefix, block index and weight/bias suffix
    (`self_attn.q_proj`, `input_layernorm`, `embed_tokens`): one entry per projection type."""
    match = _LAYER.search(name)
    rest = name[match.end() :] if match else name
    if not match and rest.startswith("model."):
        rest = rest[len("model.") :]
    for suffix in (".weight", ".bias"):
        if rest.endswith(suffix):
            rest = rest[: -len(suffix)]
    return rest
