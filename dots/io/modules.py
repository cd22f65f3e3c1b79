"""Where a parameter sits in a transformer: its module class, module group, layer and kind.

The one place that reads a tensor's role from its name (Qwen2 / Llama / Mistral naming:
`q_proj`, `k_proj`, `v_proj`, `o_proj` and their biases; `gate_proj`, `up_proj`,
`down_proj`; `embed_tokens`, `lm_head`; `input_layernorm`, `post_attention_layernorm`,
`model.norm`), shared by the task-vector analysis and the module-wise search.

Module classes follow DoTS Fig. 1c / Tab. 12 (attention, MLP, LayerNorm, embedding,
LM head); anything else (e.g. a vision tower, rotary buffers) is `other`. Module groups
are the coarser split the search gives coefficients to (`search.granularity=module`):
attention, mlp, embed_head (embedding and LM head: tied models share one tensor for
both), norm; a tensor of class `other` has no group, and asking for it is an error that
names the tensor, since quietly giving it some group's λ would search a coefficient the
user never asked for.
"""

from __future__ import annotations

import re

from dots.errors import DotsError

__all__ = ["MODULE_CLASSES", "MODULE_GROUPS", "layer_index", "module_class", "module_group", "module_kind"]

MODULE_CLASSES = ("attention", "mlp", "norm", "embedding", "lm_head", "other")
MODULE_GROUPS = ("attention", "mlp", "embed_head", "norm")
_GROUP_OF_CLASS = {
    "attention": "attention",
    "mlp": "mlp",
    "embedding": "embed_head",
    "lm_head": "embed_head",
    "norm": "norm",
}

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


def module_group(name: str) -> str:
    """attention / mlp / embed_head / norm (`MODULE_GROUPS`): the module class with embedding
    and LM head together. A DotsError naming the tensor when its class is `other`."""
    cls = module_class(name)
    if cls not in _GROUP_OF_CLASS:
        raise DotsError(
            f"cannot tell the module group of tensor {name!r} (one of {', '.join(MODULE_GROUPS)} is read from "
            "Qwen2/Llama/Mistral-style names): use search.granularity=model for this architecture"
        )
    return _GROUP_OF_CLASS[cls]


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
