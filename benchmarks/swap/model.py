"""The model and engines of benchmarks/swap/latency.py and benchmarks/swap/profile.py: a generated
Qwen2-shaped bf16 base with an "SFT" (dense noise) and an "RLVR" (sparse, smaller noise) source,
their τ̃ cache, the λ sequence, the merged model a restart loads, and the engine of each kind."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.checkpoints import (
    SHAPES,
    Noise,
    Shape,
    add_noise,
    base_tensor,
    config,
    model_shapes,
    write_checkpoint,
)
from benchmarks.harness.tokenizer import write_tokenizer
from dots.io.checkpoint import Checkpoint
from dots.io.writer import CheckpointWriter
from dots.options.engine import EngineOptions
from dots.scoring.sampling import Sampling

PROMPT = "Question: what is 12 + 30? Answer:"
QWEN_05B = SHAPES["qwen2-0.5b-depth"]  # Qwen2.5-0.5B's widths, tied embeddings; the depth is --layers


def write_model(out: Path, layers: int, shape: Shape, noise: Noise | None) -> Path:
    """Base weights seeded by tensor name (norms near 1); a source adds seeded `noise` on its
    `density` share. bf16, with a tokenizer of the model's vocabulary."""
    if (out / "config.json").exists():
        return out

    def tensor(name: str, dims: tuple[int, ...]) -> torch.Tensor:
        t = base_tensor(name, dims, near_one=len(dims) == 1 and "norm" in name)
        return t if noise is None else add_noise(t, name, noise)

    cfg = {**config(layers, shape, torch.bfloat16, tokenizer=True), "max_position_embeddings": 4096}
    files = {
        "config.json": json.dumps(cfg, indent=2),
        "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2}),
    }
    path = write_checkpoint(out, model_shapes(layers, shape), torch.bfloat16, tensor, files)
    write_tokenizer(path, shape.vocab)
    return path


def build(workdir: Path, layers: int, shape: Shape = QWEN_05B) -> tuple[Path, Any]:
    """The base model's directory and the τ̃ cache (density 0.3) of its two sources."""
    from dots.vectors import SparsifyConfig, build_task_vectors

    base = write_model(workdir / "base", layers, shape, None)
    sft = write_model(workdir / "sft", layers, shape, Noise(1, 2e-3))
    rl = write_model(workdir / "rlvr", layers, shape, Noise(2, 5e-4, 0.2))
    for path in (base, sft, rl):
        if not (path / "tokenizer.json").exists():  # an earlier run stopped right after commit
            write_tokenizer(path, shape.vocab)
    tv = build_task_vectors(
        Checkpoint(base),
        {"sft": Checkpoint(sft), "rlvr": Checkpoint(rl)},
        SparsifyConfig(density=0.3),
        workdir / "cache",
    )
    return base, tv


def lambdas(n: int, seed: int = 0) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [{"sft": round(rng.uniform(0, 2), 3), "rlvr": round(rng.uniform(0, 2), 3)} for _ in range(n)]


def save_merged(tv, coefficients, base: Path, out: Path) -> Path:
    from dots.vectors import synthesize

    ckpt = Checkpoint(base)
    with CheckpointWriter(
        out, {n: ckpt.info(n) for n in ckpt.names}, max_shard_bytes=2 * 2**30, overwrite=True
    ) as writer:
        writer.write_all(synthesize(tv, coefficients, device="cpu", base=ckpt))
        return writer.commit(copy_from=ckpt)


def make_engine(kind: str, model: Path, tv=None, args=None, synth_cache: str = "disk", resident_form: str = "auto"):
    if kind == "vllm":
        from dots.engines.vllm.engine import VLLMEngine

        return VLLMEngine(
            model,
            EngineOptions(
                dtype="bfloat16",
                max_model_len=512,
                synth_cache=synth_cache,
                resident_form=resident_form,
                enforce_eager=args.enforce_eager,
                gpu_memory_utilization=args.memory_utilization,
            ),
            task_vectors=tv,
        )
    from dots.engines.hf import HFEngine

    return HFEngine(
        model, EngineOptions(dtype="bfloat16", synth_cache=synth_cache, resident_form=resident_form), task_vectors=tv
    )


def greedy(engine) -> str:
    return engine.generate([PROMPT], Sampling(max_tokens=8))[0][0]
