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

    python -m benchmarks.harness.generate --size-gb 1 --out /tmp/dots-bench/1gb
    python -m benchmarks.harness.generate --shape qwen2.5-1.5b --dtype bfloat16 --noise finetune --out /tmp/q15
    python -m benchmarks.harness.generate --shape llama3-70b --layers 1 --dtype bfloat16 --noise finetune --out /tmp/l70
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.harness.checkpoints import NOISE, SHAPES, layers_for, write_set
from dots.io.safetensors import dtype_size


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
