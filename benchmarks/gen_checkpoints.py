"""Generate a Qwen2-shaped base and two "fine-tuned" sources (sft, rlvr), streaming.

Every tensor is drawn from generators seeded by its name (dots.testing.name_seed) and
written straight to its offset by CheckpointWriter (one writer per checkpoint, all three
filled in one pass), so no model is ever materialised: memory stays at a few copies of
one tensor.

Default (unchanged): Qwen2-0.5B widths (hidden 896, 14 heads of 64, 2 KV heads, MLP
4864, vocab 151936, tied embeddings) in float32, the size set by the number of layers
(`--size-gb`), so the largest tensor (the 151936×896 embedding, 545 MB) is the same at
every size — which is what a memory-scaling measurement of a streaming merge needs; the
sources add dense Gaussian noise (sft σ = 2e-3, rlvr σ = 5e-4) to the base.

Options for other benchmarks:

- `--shape qwen2.5-0.5b|qwen2.5-1.5b|qwen2.5-3b`: the real Qwen2.5 widths and depth
  (0.5B: hidden 896, 14/2 heads, MLP 4864, 24 layers; 1.5B: 1536, 12/2, 8960, 28;
  3B: 2048, 16/2, 11008, 36; all vocab 151936 with tied embeddings: 494 M, 1.54 B,
  3.09 B parameters). `--layers N` and `--vocab V` override depth and vocabulary (tiny
  smoke runs); `--size-gb` still sets the depth when given.
- `--dtype bfloat16`: weights and config.json's `torch_dtype` in bf16.
- `--noise finetune`: sources that look like post-training in the stored dtype. The base
  is rounded to the dtype first and each source is round(base + noise), so an entry is
  "changed" only if the update survives the rounding, as in a real bf16 checkpoint.
  sft: dense Gaussian noise, σ = 2% of the tensor's scale (0.02 for matrices and
  biases, 1.0 for the 1-D tensors that sit near 1) — a few bf16 ulps, so ~9 in 10
  entries change; rlvr: the same kind of noise at σ = 1% on a random 10% of entries —
  sparse and smaller, overlapping sft's changes with independent signs (so TIES and RAM
  meet real sign conflicts and partially overlapping updates).

    python benchmarks/gen_checkpoints.py --size-gb 1 --out /tmp/dots-bench/1gb
    python benchmarks/gen_checkpoints.py --shape qwen2.5-1.5b --dtype bfloat16 --noise finetune --out /tmp/q15
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dots.io.safetensors import TensorInfo, dtype_size  # noqa: E402
from dots.io.writer import CheckpointWriter
from dots.keys import name_seed  # noqa: E402

HIDDEN, HEADS, KV_HEADS, MLP, VOCAB = 896, 14, 2, 4864, 151936
HEAD_DIM = HIDDEN // HEADS
BLOCK = 1 << 22  # noise entries drawn at a time (finetune noise)


@dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    mlp: int
    layers: int | None  # None: set by --size-gb
    vocab: int = VOCAB


SHAPES = {
    "qwen2-0.5b-depth": Shape(HIDDEN, HEADS, KV_HEADS, MLP, None),  # the default: depth from --size-gb
    "qwen2.5-0.5b": Shape(896, 14, 2, 4864, 24),
    "qwen2.5-1.5b": Shape(1536, 12, 2, 8960, 28),
    "qwen2.5-3b": Shape(2048, 16, 2, 11008, 36),
}


@dataclass(frozen=True)
class Noise:
    seed: int
    std: float
    density: float = 1.0
    relative: bool = False  # std is a fraction of the tensor's scale (0.02, or 1.0 for 1-D)
    block: int | None = None  # draw in blocks of this many entries (None: the whole tensor at once)


NOISE = {
    "dense": {"sft": Noise(1, 2e-3), "rlvr": Noise(2, 5e-4)},
    "finetune": {"sft": Noise(1, 0.02, 1.0, True, BLOCK), "rlvr": Noise(2, 0.01, 0.1, True, BLOCK)},
}


def layer_shapes(i: int, shape: Shape = SHAPES["qwen2-0.5b-depth"]) -> dict[str, tuple[int, ...]]:
    p = f"model.layers.{i}."
    h, kv = shape.hidden, shape.kv_heads * (shape.hidden // shape.heads)
    return {
        p + "input_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (h, h), p + "self_attn.q_proj.bias": (h,),
        p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.k_proj.bias": (kv,),
        p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.v_proj.bias": (kv,),
        p + "self_attn.o_proj.weight": (h, h),
        p + "post_attention_layernorm.weight": (h,),
        p + "mlp.gate_proj.weight": (shape.mlp, h), p + "mlp.up_proj.weight": (shape.mlp, h),
        p + "mlp.down_proj.weight": (h, shape.mlp),
    }


def model_shapes(num_layers: int, shape: Shape = SHAPES["qwen2-0.5b-depth"]) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (shape.vocab, shape.hidden)}
    for i in range(num_layers):
        shapes.update(layer_shapes(i, shape))
    shapes["model.norm.weight"] = (shape.hidden,)
    return shapes


def layers_for(size_bytes: float, shape: Shape = SHAPES["qwen2-0.5b-depth"], element_size: int = 4) -> int:
    embed = shape.vocab * shape.hidden * element_size
    per_layer = sum(torch.Size(s).numel() for s in layer_shapes(0, shape).values()) * element_size
    return max(1, round((size_bytes - embed) / per_layer))


def config(num_layers: int, shape: Shape = SHAPES["qwen2-0.5b-depth"], dtype: torch.dtype = torch.float32) -> dict:
    eos = min(151643, shape.vocab - 1)
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": shape.hidden,
        "intermediate_size": shape.mlp, "num_hidden_layers": num_layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "vocab_size": shape.vocab, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "torch_dtype": str(dtype).removeprefix("torch."), "hidden_act": "silu", "bos_token_id": eos,
        "eos_token_id": eos, "use_sliding_window": False, "max_window_layers": num_layers,
    }


def base_tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Base values (seed 0): N(0, 0.02²), plus 1 for 1-D tensors, in float32."""
    gen = torch.Generator().manual_seed(name_seed(name, 0))
    t = torch.randn(shape, generator=gen).mul_(0.02)
    if len(shape) == 1:
        t.add_(1.0)
    return t


def add_noise(t: torch.Tensor, name: str, noise: Noise) -> torch.Tensor:
    """t + seeded noise of `noise` (on a seeded `density` share of entries), in place."""
    gen = torch.Generator().manual_seed(name_seed(name, noise.seed))
    std = noise.std * (1.0 if t.dim() == 1 else 0.02) if noise.relative else noise.std
    flat = t.view(-1)
    block = noise.block or flat.numel()
    for start in range(0, flat.numel(), block):
        part = flat[start:start + block]
        delta = torch.randn(part.shape, generator=gen).mul_(std)
        if noise.density < 1:
            delta.mul_(torch.rand(part.shape, generator=gen) < noise.density)
        part.add_(delta)
    return t


def tensor(name: str, shape: tuple[int, ...], source_seed: int | None, scale: float) -> torch.Tensor:
    """Base values (seed 0), plus seeded dense noise of `scale` for a source (the default noise)."""
    t = base_tensor(name, shape)
    return t if source_seed is None else add_noise(t, name, Noise(source_seed, scale))


def write_set(out: Path, num_layers: int, shape: Shape = SHAPES["qwen2-0.5b-depth"],
              dtype: torch.dtype = torch.float32, noise: str = "dense") -> dict[str, Path]:
    """base/, sft/, rlvr/ under `out`, one tensor at a time (the base is drawn once per tensor)."""
    shapes = model_shapes(num_layers, shape)
    plan = {n: TensorInfo(s, dtype) for n, s in shapes.items()}
    cfg = json.dumps(config(num_layers, shape, dtype), indent=2)
    sources = NOISE[noise]
    writers = {key: CheckpointWriter(out / key, plan, max_shard_bytes=2 * 2**30, overwrite=True)
               for key in ("base", *sources)}
    try:
        for name, dims in shapes.items():
            base = base_tensor(name, dims).to(dtype).float()  # what the base checkpoint stores
            writers["base"].write(name, base)
            for key, spec in sources.items():
                writers[key].write(name, add_noise(base.clone(), name, spec))
            del base
        paths = {}
        for key, writer in writers.items():
            writer.add_file("config.json", cfg)
            paths[key] = writer.commit()
        return paths
    finally:
        for writer in writers.values():
            writer.abort()  # no-op after a commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=None,
                        help="size of each checkpoint in GB (1e9 bytes), set by depth; "
                        "required without --shape and --layers")
    parser.add_argument("--out", type=Path, required=True, help="directory that receives base/ sft/ rlvr/")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-0.5b-depth",
                        help="widths (and depth) of the model; default: Qwen2-0.5B widths, depth from --size-gb")
    parser.add_argument("--layers", type=int, default=None, help="number of layers (overrides --size-gb and --shape)")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 151936)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--noise", choices=sorted(NOISE), default="dense",
                        help="dense: the default Gaussian noise; finetune: bf16-aware dense sft + sparse rlvr")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    if args.vocab is not None:
        shape = Shape(shape.hidden, shape.heads, shape.kv_heads, shape.mlp, shape.layers, args.vocab)
    dtype = getattr(torch, args.dtype)
    if args.layers is not None:
        layers = args.layers
    elif args.size_gb is not None:
        layers = layers_for(args.size_gb * 1e9, shape, dtype_size(dtype))
    elif shape.layers is not None:
        layers = shape.layers
    else:
        parser.error("--size-gb (or --layers) is required without --shape")
    for path in write_set(args.out, layers, shape, dtype, args.noise).values():
        size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        print(f"{path}: {layers} layers, {size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
