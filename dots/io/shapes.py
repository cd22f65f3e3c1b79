"""What a model's tensors are without reading a weight: names, shapes, dtypes, attention
geometry — from a checkpoint's safetensors headers, or from a config.json alone.

The memory plan (`dots.plan`) needs only this. From a checkpoint (a local
directory or a Hub id: config and headers, no weights) the tensors are exact; with
`ModelShapes.from_config` they are derived from a decoder-only transformer config of the
Llama family (Llama, Qwen2, Mistral: embeddings, per layer q/k/v/o + gated MLP + two
norms, final norm, lm_head unless tied), so a plan for a 70B model needs no download.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import torch

from dots.errors import DotsError
from dots.io.metadata import check_config, read_json
from dots.io.safetensors import TensorInfo, dtype_size

if TYPE_CHECKING:
    from dots.io.align import Alignment

__all__ = ["ModelShapes"]

CONFIG_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# model_type -> whether q/k/v carry a bias (Qwen2 does; Llama and Mistral do not unless
# the config says attention_bias: true)
LLAMA_FAMILY = {"llama": False, "mistral": False, "qwen2": True}


@dataclass(frozen=True)
class ModelShapes:
    """A model's tensors and attention geometry, as the memory plan needs them.

    `tensors`: every tensor of the base (name → shape, dtype); `merged`: the names the
    task vectors cover; `extra_rows`: vocabulary rows a source adds (name → rows);
    `source_dtype`: the dtype the sources store (the compact τ̃ keeps θ_i's values in it).
    """

    name: str
    tensors: dict[str, TensorInfo]
    merged: list[str]
    layers: int
    kv_heads: int
    head_dim: int
    max_position: int
    source_dtype: torch.dtype
    extra_rows: dict[str, int] = field(default_factory=dict)

    @property
    def params(self) -> int:
        return sum(i.numel for i in self.tensors.values())

    @property
    def nbytes(self) -> int:
        return sum(i.nbytes for i in self.tensors.values())

    def extra_bytes(self, name: str) -> int:
        """Bytes of the rows a source adds to tensor `name` (0 when none does)."""
        rows = self.extra_rows.get(name, 0)
        info = self.tensors[name]
        return rows * (info.numel // info.shape[0]) * dtype_size(info.dtype) if rows else 0

    def kv_bytes_per_token(self, dtype: torch.dtype, tensor_parallel: int = 1) -> int:
        """KV-cache bytes of one token on one device: K and V of every layer, of the KV heads
        this device holds (heads split over `tensor_parallel`, replicated beyond their count)."""
        heads = max(1, self.kv_heads // max(1, tensor_parallel))
        return 2 * self.layers * heads * self.head_dim * dtype_size(dtype)

    @classmethod
    def from_config(cls, config: Mapping, name: str = "config.json") -> ModelShapes:
        """Tensors derived from a Llama-family config.json (no weights needed)."""
        model_type = str(config.get("model_type", ""))
        if model_type not in LLAMA_FAMILY:
            raise DotsError(
                f"{name}: shapes of model_type {model_type!r} cannot be derived from its config "
                f"(known: {', '.join(sorted(LLAMA_FAMILY))}); give the checkpoint itself"
            )
        try:
            hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
            heads, mlp, vocab = (
                int(config["num_attention_heads"]),
                int(config["intermediate_size"]),
                int(config["vocab_size"]),
            )
        except KeyError as exc:
            raise DotsError(f"{name} lacks {exc.args[0]}") from None
        geo = geometry(config)
        kv_heads, head_dim = geo["kv_heads"], geo["head_dim"]
        dtype = CONFIG_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), torch.bfloat16)
        bias = bool(config.get("attention_bias", LLAMA_FAMILY[model_type]))
        q, kv = heads * head_dim, kv_heads * head_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
        for i in range(layers):
            p = f"model.layers.{i}."
            shapes |= {
                p + "self_attn.q_proj.weight": (q, hidden),
                p + "self_attn.k_proj.weight": (kv, hidden),
                p + "self_attn.v_proj.weight": (kv, hidden),
                p + "self_attn.o_proj.weight": (hidden, q),
                p + "mlp.gate_proj.weight": (mlp, hidden),
                p + "mlp.up_proj.weight": (mlp, hidden),
                p + "mlp.down_proj.weight": (hidden, mlp),
                p + "input_layernorm.weight": (hidden,),
                p + "post_attention_layernorm.weight": (hidden,),
            }
            if bias:
                shapes |= {p + f"self_attn.{x}_proj.bias": (n,) for x, n in (("q", q), ("k", kv), ("v", kv))}
        shapes["model.norm.weight"] = (hidden,)
        if not config.get("tie_word_embeddings", False):
            shapes["lm_head.weight"] = (vocab, hidden)
        tensors = {n: TensorInfo(s, dtype) for n, s in shapes.items()}
        return cls(
            name=name,
            tensors=tensors,
            merged=list(tensors),
            **geo,
            source_dtype=dtype,
        )

    @classmethod
    def from_config_file(cls, path: str | os.PathLike) -> ModelShapes:
        """`from_config` of a config.json file (or of the one in a directory)."""
        file = Path(path)
        file = file / "config.json" if file.is_dir() else file
        if not file.is_file():
            raise DotsError(f"no config.json at {path}")
        return cls.from_config(check_config(read_json(file, "config"), file), str(file))

    @classmethod
    def from_alignment(cls, alignment: Alignment) -> ModelShapes:
        """Exact tensors of an aligned base and sources (`dots.io.align.align`: headers only)."""
        base = alignment.base
        first = alignment.merged[0] if alignment.merged else None
        dtypes = [c.info(alignment.source_name(k, first)).dtype for k, c in alignment.sources.items()] if first else []
        return cls(
            name=str(base.source),
            tensors={n: base.info(n) for n in base.names},
            merged=list(alignment.merged),
            **geometry(base.config),
            source_dtype=max(dtypes, key=dtype_size) if dtypes else base.info(base.names[0]).dtype,
            extra_rows={n: alignment.out_plan[n].shape[0] - base.info(n).shape[0] for n in alignment.extra_rows},
        )


def geometry(config: Mapping) -> dict[str, Any]:
    """Layers, KV heads, head dimension and position limit of a decoder config (0 when absent)."""
    heads = int(config.get("num_attention_heads") or 1)
    return {
        "layers": int(config.get("num_hidden_layers") or 0),
        "kv_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or int(config.get("hidden_size") or 0) // heads),
        "max_position": int(config.get("max_position_embeddings") or 0),
    }
