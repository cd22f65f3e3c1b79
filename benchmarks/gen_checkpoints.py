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
- `--shape qwen2.5-7b`: Qwen2.5-7B's widths (hidden 3584, 28 heads of 128, 4 KV heads,
  MLP 18944, q/k/v biases, vocab 152064, UNTIED embedding and lm_head; 28 layers, 7.62 B
  parameters). `--shape llama3-70b`: Llama-3-70B's (hidden 8192, 64 heads of 128, 8 KV
  heads, MLP 28672, no biases, vocab 128256, untied; 80 layers, 70.6 B parameters).
  With `--layers 1` or `2` these carry every tensor shape of the real model at a
  fraction of its size (7B: 1.56 B parameters at 2 layers, 3.1 GB per bf16 checkpoint;
  70B: 2.96 B / 3.81 B at 1 / 2 layers, 5.9 / 7.6 GB). Their tensors are drawn and
  written in row blocks of 2^24 entries (`Shape.block_entries`), so generating a
  1.05 G-entry 70B embedding takes a few hundred MB; the older shapes keep whole-tensor
  draws (the same bytes as before).
- `--tokenizer`: also write a character-level tokenizer padded with filler tokens to
  the vocabulary size into each directory (what `dots.search`, SAR's Fisher pass and
  vLLM need); config.json's bos/eos/pad ids are then the tokenizer's.
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
    python benchmarks/gen_checkpoints.py --shape llama3-70b --layers 1 --dtype bfloat16 --noise finetune --out /tmp/l70
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
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


def write_tokenizer(out: Path, vocab: int) -> None:
    """A character-level fast tokenizer (printable ASCII and newline, <pad> <s> </s> <unk> =
    ids 0-3) padded with filler tokens to `vocab` entries, so that every id a model with
    random weights may sample decodes (vLLM's detokenizer needs that)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = sorted(set(string.printable[:95] + "\n"))
    table = {tok: i for i, tok in enumerate(specials + chars)}
    for i in range(len(table), vocab):
        table[f"<x{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out)


def base_tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Base values (seed 0): N(0, 0.02²), plus 1 for 1-D tensors, in float32."""
    gen = torch.Generator().manual_seed(name_seed(name, 0))
    t = torch.randn(shape, generator=gen).mul_(0.02)
    if len(shape) == 1:
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


def tensor(name: str, shape: tuple[int, ...], source_seed: int | None, scale: float) -> torch.Tensor:
    """Base values (seed 0), plus seeded dense noise of `scale` for a source (the default noise)."""
    t = base_tensor(name, shape)
    return t if source_seed is None else add_noise(t, name, Noise(source_seed, scale))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-gb",
        type=float,
        default=None,
        help="size of each checkpoint in GB (1e9 bytes), set by depth; required without --shape and --layers",
    )
    parser.add_argument("--out", type=Path, required=True, help="directory that receives base/ sft/ rlvr/")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="qwen2-0.5b-depth",
        help="widths (and depth) of the model; default: Qwen2-0.5B widths, depth from --size-gb",
    )
    parser.add_argument("--layers", type=int, default=None, help="number of layers (overrides --size-gb and --shape)")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 151936)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--noise",
        choices=sorted(NOISE),
        default="dense",
        help="dense: the default Gaussian noise; finetune: bf16-aware dense sft + sparse rlvr",
    )
    parser.add_argument(
        "--tokenizer",
        action="store_true",
        help="also write a character-level tokenizer padded to the vocabulary (search, SAR, vLLM)",
    )
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    if args.vocab is not None:
        shape = replace(shape, vocab=args.vocab)
    dtype = getattr(torch, args.dtype)
    if args.layers is not None:
        layers = args.layers
    elif args.size_gb is not None:
        layers = layers_for(args.size_gb * 1e9, shape, dtype_size(dtype))
    elif shape.layers is not None:
        layers = shape.layers
    else:
        parser.error("--size-gb (or --layers) is required without --shape")
    for path in write_set(args.out, layers, shape, dtype, args.noise, args.tokenizer).values():
        size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        print(f"{path}: {layers} layers, {size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
