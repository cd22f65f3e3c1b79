"""Tiny generated checkpoints for tests and benchmarks (nothing is downloaded).

`make_tiny_model` builds a real transformers model (Qwen2 or Llama architecture) with a
char-level tokenizer and saves it as safetensors; `make_finetuned` derives a "fine-tuned"
checkpoint from it by adding seeded noise, optionally sparse, optionally in another dtype.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.keys import name_seed

if TYPE_CHECKING:
    from transformers import PretrainedConfig

__all__ = ["make_finetuned", "make_tiny_model", "peak_cpu_alloc_bytes", "put_in_hub_cache"]


def make_tiny_model(
    path: str | os.PathLike,
    arch: str = "qwen2",
    dtype: torch.dtype = torch.float32,
    tie_word_embeddings: bool = False,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 128,
    seed: int = 0,
    max_shard_size: str | int | None = None,
) -> Path:
    """Save a randomly initialised causal LM (+ char tokenizer) under `path`."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    from dots.lab.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config: PretrainedConfig
    if arch == "qwen2":
        config = Qwen2Config(**common)
    elif arch == "llama":
        config = LlamaConfig(**common)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # default init of norms is ones; perturb so merges touch them
        for _name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.02 * torch.randn_like(p))
    model = model.to(dtype)
    model.config.torch_dtype = dtype
    path = Path(path)
    kwargs: dict[str, Any] = {"safe_serialization": True}
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **kwargs)
    tok.save_pretrained(path)
    return path


def make_finetuned(
    base: str | os.PathLike,
    out: str | os.PathLike,
    seed: int,
    scale: float = 0.01,
    density: float = 1.0,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = 5 * 2**30,
) -> Path:
    """θ = θ0 + noise: seeded per tensor name; `density` < 1 leaves the rest unchanged."""
    ckpt = Checkpoint(base)
    plan = {n: TensorInfo(ckpt.info(n).shape, dtype or ckpt.info(n).dtype) for n in ckpt.names}
    with CheckpointWriter(out, plan, max_shard_bytes=max_shard_bytes) as writer:
        for name, tensor in ckpt.tensors():
            if tensor.is_floating_point():
                gen = torch.Generator().manual_seed(name_seed(name, seed))
                noise = torch.randn(tensor.shape, generator=gen) * scale
                if density < 1.0:
                    keep = torch.rand(tensor.shape, generator=gen) < density
                    noise = noise * keep
                tensor = tensor.float() + noise
            writer.write(name, tensor)
        out_path = writer.commit(copy_from=ckpt)
    if dtype is not None:
        import json

        cfg_path = out_path / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["torch_dtype"] = str(dtype).replace("torch.", "")
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return out_path


def put_in_hub_cache(
    model_dir: str | os.PathLike, repo_id: str, cache_dir: str | os.PathLike, revision: str = "main"
) -> Path:
    """Lay `model_dir` out in a Hugging Face cache as `huggingface_hub` writes a download:
    `models--org--name/blobs/<sha256>`, `refs/<revision>` holding a commit hash, and
    `snapshots/<commit>/<file>` relative links to the blobs. Returns the snapshot directory."""
    import hashlib
    import shutil

    files = sorted(p for p in Path(model_dir).rglob("*") if p.is_file())
    repo = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    commit = hashlib.sha1("".join(f"{f.relative_to(model_dir)}:{d}" for f, d in digests.items()).encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    snapshot = repo / "snapshots" / commit
    for f, digest in digests.items():
        blob = repo / "blobs" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            shutil.copyfile(f, blob)
        link = snapshot / f.relative_to(model_dir)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def peak_cpu_alloc_bytes(fn: Any) -> int:
    """The largest number of bytes torch held allocated on the CPU while `fn()` ran, from the
    profiler's memory records (each op's own allocations net of its own frees, in time
    order): deterministic, unlike RSS, so tests can bound the working set of a step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    held = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        held += event.self_cpu_memory_usage
        peak = max(peak, held)
    return peak
