"""Generated checkpoints: a Qwen2- or Llama-shaped base and two "fine-tuned" sources (sft, rlvr),
streamed. Every tensor is drawn from generators seeded by its name (dots.keys.name_seed) and
written straight to its offset by CheckpointWriter, so no model is ever materialised: memory
stays at a few copies of one tensor. benchmarks/harness/generate.py is its command line and
says what each shape and noise is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from benchmarks.harness.tokenizer import write_tokenizer
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.keys import name_seed

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
    arch: str = "qwen2"  # qwen2 (q/k/v biases) | llama (no biases)
    tied: bool = True  # False: an lm_head.weight of its own
    block_entries: int | None = None  # draw and write tensors in row blocks of about this many entries


SHAPES = {
    "qwen2-0.5b-depth": Shape(HIDDEN, HEADS, KV_HEADS, MLP, None),  # the default: depth from --size-gb
    "qwen2.5-0.5b": Shape(896, 14, 2, 4864, 24),
    "qwen2.5-1.5b": Shape(1536, 12, 2, 8960, 28),
    "qwen2.5-3b": Shape(2048, 16, 2, 11008, 36),
    "qwen2.5-7b": Shape(3584, 28, 4, 18944, 28, 152064, "qwen2", False, 1 << 24),
    "llama3-70b": Shape(8192, 64, 8, 28672, 80, 128256, "llama", False, 1 << 24),
}
ARCH = {  # config.json fields per architecture
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "eos": 151643,
    },
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 8192,
        "eos": 128001,
    },
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
    bias = shape.arch == "qwen2"
    shapes = {
        p + "input_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (h, h),
        p + "self_attn.q_proj.bias": (h,),
        p + "self_attn.k_proj.weight": (kv, h),
        p + "self_attn.k_proj.bias": (kv,),
        p + "self_attn.v_proj.weight": (kv, h),
        p + "self_attn.v_proj.bias": (kv,),
        p + "self_attn.o_proj.weight": (h, h),
        p + "post_attention_layernorm.weight": (h,),
        p + "mlp.gate_proj.weight": (shape.mlp, h),
        p + "mlp.up_proj.weight": (shape.mlp, h),
        p + "mlp.down_proj.weight": (h, shape.mlp),
    }
    return shapes if bias else {n: s for n, s in shapes.items() if not n.endswith(".bias")}


def model_shapes(num_layers: int, shape: Shape = SHAPES["qwen2-0.5b-depth"]) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (shape.vocab, shape.hidden)}
    for i in range(num_layers):
        shapes.update(layer_shapes(i, shape))
    shapes["model.norm.weight"] = (shape.hidden,)
    if not shape.tied:
        shapes["lm_head.weight"] = (shape.vocab, shape.hidden)
    return shapes


def layers_for(size_bytes: float, shape: Shape = SHAPES["qwen2-0.5b-depth"], element_size: int = 4) -> int:
    embed = shape.vocab * shape.hidden * element_size
    per_layer = sum(torch.Size(s).numel() for s in layer_shapes(0, shape).values()) * element_size
    return max(1, round((size_bytes - embed) / per_layer))


def config(
    num_layers: int,
    shape: Shape = SHAPES["qwen2-0.5b-depth"],
    dtype: torch.dtype = torch.float32,
    tokenizer: bool = False,
) -> dict:
    arch = ARCH[shape.arch]
    eos = min(arch["eos"], shape.vocab - 1)
    cfg = {
        "architectures": arch["architectures"],
        "model_type": arch["model_type"],
        "hidden_size": shape.hidden,
        "intermediate_size": shape.mlp,
        "num_hidden_layers": num_layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "vocab_size": shape.vocab,
        "max_position_embeddings": arch["max_position_embeddings"],
        "rms_norm_eps": arch["rms_norm_eps"],
        "rope_theta": arch["rope_theta"],
        "tie_word_embeddings": shape.tied,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "hidden_act": "silu",
        "bos_token_id": eos,
        "eos_token_id": eos,
    }
    if shape.arch == "qwen2":
        cfg.update(use_sliding_window=False, max_window_layers=num_layers)
    else:
        cfg.update(head_dim=shape.hidden // shape.heads, attention_bias=False, mlp_bias=False)
    if tokenizer:  # the ids of write_tokenizer's specials
        cfg.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return cfg


def base_tensor(name: str, shape: tuple[int, ...], near_one: bool | None = None) -> torch.Tensor:
    """Base values (seed 0): N(0, 0.02²), plus 1 where `near_one` (default: for 1-D tensors), in float32."""
    gen = torch.Generator().manual_seed(name_seed(name, 0))
    t = torch.randn(shape, generator=gen).mul_(0.02)
    if len(shape) == 1 if near_one is None else near_one:
        t.add_(1.0)
    return t


def add_noise(
    t: torch.Tensor, name: str, noise: Noise, gen: torch.Generator | None = None, matrix: bool | None = None
) -> torch.Tensor:
    """t + seeded noise of `noise` (on a seeded `density` share of entries), in place. A tensor
    generated in row blocks passes the same `gen` for every block (and `matrix`: whether the
    whole tensor is 2-D, which sets a relative noise's scale)."""
    gen = gen if gen is not None else torch.Generator().manual_seed(name_seed(name, noise.seed))
    matrix = t.dim() != 1 if matrix is None else matrix
    std = noise.std * (0.02 if matrix else 1.0) if noise.relative else noise.std
    flat = t.view(-1)
    block = noise.block or flat.numel()
    for start in range(0, flat.numel(), block):
        part = flat[start : start + block]
        delta = torch.randn(part.shape, generator=gen).mul_(std)
        if noise.density < 1:
            delta.mul_(torch.rand(part.shape, generator=gen) < noise.density)
        part.add_(delta)
    return t


def write_blocked(
    writers: dict[str, CheckpointWriter],
    sources: dict[str, Noise],
    name: str,
    dims: tuple[int, ...],
    dtype: torch.dtype,
    block_entries: int,
) -> None:
    """One tensor of every checkpoint, drawn and written `block_entries` at a time (whole rows):
    the base from one generator seeded by (name, 0), each source's noise from one generator
    seeded by (name, seed), each carried from block to block."""
    per_row = torch.Size(dims[1:]).numel()
    step = max(1, block_entries // per_row)
    base_gen = torch.Generator().manual_seed(name_seed(name, 0))
    noise_gens = {key: torch.Generator().manual_seed(name_seed(name, spec.seed)) for key, spec in sources.items()}
    for r0 in range(0, dims[0], step):
        rows = (min(step, dims[0] - r0), *dims[1:])
        base = torch.randn(rows, generator=base_gen).mul_(0.02)
        if len(dims) == 1:
            base.add_(1.0)
        base = base.to(dtype).float()
        for key, writer in writers.items():
            block = (
                base if key == "base" else add_noise(base.clone(), name, sources[key], noise_gens[key], len(dims) != 1)
            )
            writer.write_rows(name, r0, block.to(dtype))  # cast now: the writer holds it until written
            del block
        del base


def write_set(
    out: Path,
    num_layers: int,
    shape: Shape = SHAPES["qwen2-0.5b-depth"],
    dtype: torch.dtype = torch.float32,
    noise: str = "dense",
    tokenizer: bool = False,
) -> dict[str, Path]:
    """base/, sft/, rlvr/ under `out`, one tensor at a time (the base is drawn once per tensor;
    with `shape.block_entries`, one row block at a time)."""
    shapes = model_shapes(num_layers, shape)
    plan = {n: TensorInfo(s, dtype) for n, s in shapes.items()}
    cfg = json.dumps(config(num_layers, shape, dtype, tokenizer), indent=2)
    sources = NOISE[noise]
    writers = {
        key: CheckpointWriter(out / key, plan, max_shard_bytes=2 * 2**30, overwrite=True) for key in ("base", *sources)
    }
    try:
        for name, dims in shapes.items():
            if shape.block_entries is not None and torch.Size(dims).numel() > shape.block_entries:
                write_blocked(writers, sources, name, dims, dtype, shape.block_entries)
                continue
            base = base_tensor(name, dims).to(dtype).float()  # what the base checkpoint stores
            writers["base"].write(name, base)
            for key, spec in sources.items():
                writers[key].write(name, add_noise(base.clone(), name, spec))
            del base
        paths = {}
        for key, writer in writers.items():
            writer.add_file("config.json", cfg)
            paths[key] = writer.commit()
        if tokenizer:
            for path in paths.values():
                write_tokenizer(path, shape.vocab)
        return paths
    finally:
        for writer in writers.values():
            writer.abort()  # no-op after a commit


def write_checkpoint(
    out: Path,
    shapes: dict[str, tuple[int, ...]],
    dtype: torch.dtype,
    tensor_of: Callable[[str, tuple[int, ...]], torch.Tensor],
    files: dict[str, str],
    max_shard_bytes: int = 2 * 2**30,
) -> Path:
    """One checkpoint under `out`: `tensor_of(name, shape)` for each tensor (cast to `dtype` as it
    is written), plus `files` (name → text, e.g. config.json); its committed directory."""
    plan = {n: TensorInfo(s, dtype) for n, s in shapes.items()}
    with CheckpointWriter(out, plan, max_shard_bytes=max_shard_bytes) as writer:
        for name, shape in shapes.items():
            writer.write(name, tensor_of(name, shape))
        for file_name, text in files.items():
            writer.add_file(file_name, text)
        return writer.commit()
