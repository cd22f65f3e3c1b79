"""Generate a Qwen2-shaped float32 base and two "fine-tuned" sources of a given size, streaming.

Every tensor is drawn from a generator seeded by its name (dots.testing.name_seed) and
written straight to its offset by CheckpointWriter, so no model is ever materialised:
memory stays at one tensor. Shapes follow Qwen2-0.5B (hidden 896, 14 heads of 64, 2 KV
heads, MLP 4864, vocab 151936, tied embeddings); the size is set by the number of
layers, so the largest tensor (the 151936×896 embedding, 545 MB) is the same at every
size — which is what a memory-scaling measurement of a streaming merge needs.

    python benchmarks/gen_checkpoints.py --size-gb 1 --out /tmp/dots-bench/1gb
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dots.checkpoint import CheckpointWriter, TensorInfo
from dots.testing import name_seed

HIDDEN, HEADS, KV_HEADS, MLP, VOCAB = 896, 14, 2, 4864, 151936
HEAD_DIM = HIDDEN // HEADS


def layer_shapes(i: int) -> dict[str, tuple[int, ...]]:
    p = f"model.layers.{i}."
    kv = KV_HEADS * HEAD_DIM
    return {
        p + "input_layernorm.weight": (HIDDEN,),
        p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN), p + "self_attn.q_proj.bias": (HIDDEN,),
        p + "self_attn.k_proj.weight": (kv, HIDDEN), p + "self_attn.k_proj.bias": (kv,),
        p + "self_attn.v_proj.weight": (kv, HIDDEN), p + "self_attn.v_proj.bias": (kv,),
        p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        p + "post_attention_layernorm.weight": (HIDDEN,),
        p + "mlp.gate_proj.weight": (MLP, HIDDEN), p + "mlp.up_proj.weight": (MLP, HIDDEN),
        p + "mlp.down_proj.weight": (HIDDEN, MLP),
    }


def model_shapes(num_layers: int) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(num_layers):
        shapes.update(layer_shapes(i))
    shapes["model.norm.weight"] = (HIDDEN,)
    return shapes


def layers_for(size_bytes: float) -> int:
    embed = VOCAB * HIDDEN * 4
    per_layer = sum(torch.Size(s).numel() for s in layer_shapes(0).values()) * 4
    return max(1, round((size_bytes - embed) / per_layer))


def config(num_layers: int) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": HIDDEN,
        "intermediate_size": MLP, "num_hidden_layers": num_layers, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
        "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151643,
    }


def tensor(name: str, shape: tuple[int, ...], source_seed: int | None, scale: float) -> torch.Tensor:
    """Base values (seed 0), plus seeded noise of `scale` for a source."""
    gen = torch.Generator().manual_seed(name_seed(name, 0))
    t = torch.randn(shape, generator=gen).mul_(0.02)
    if len(shape) == 1:
        t.add_(1.0)
    if source_seed is not None:
        gen = torch.Generator().manual_seed(name_seed(name, source_seed))
        t.add_(torch.randn(shape, generator=gen).mul_(scale))
    return t


def write_checkpoint(out: Path, num_layers: int, source_seed: int | None, scale: float) -> Path:
    shapes = model_shapes(num_layers)
    plan = {n: TensorInfo(s, torch.float32) for n, s in shapes.items()}
    with CheckpointWriter(out, plan, max_shard_bytes=2 * 2**30, overwrite=True) as writer:
        for name, shape in shapes.items():
            writer.write(name, tensor(name, shape, source_seed, scale))
        writer.add_file("config.json", json.dumps(config(num_layers), indent=2))
        return writer.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, required=True, help="size of each checkpoint in GB (1e9 bytes)")
    parser.add_argument("--out", type=Path, required=True, help="directory that receives base/ sft/ rlvr/")
    args = parser.parse_args()
    layers = layers_for(args.size_gb * 1e9)
    for key, seed, scale in (("base", None, 0.0), ("sft", 1, 2e-3), ("rlvr", 2, 5e-4)):
        path = write_checkpoint(args.out / key, layers, seed, scale)
        size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        print(f"{path}: {layers} layers, {size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
