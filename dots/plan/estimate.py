"""What a run needs per device: the bytes of θ0 and τ̃ held resident in a resident form
(transformers: the whole model; vLLM: each worker's shard), or of one tensor at a time read
from the cache, and the allowances beside the engine."""

from __future__ import annotations

from typing import Mapping

import torch

from dots.io.safetensors import TensorInfo

GB = 1e9
PROMPT_TOKENS = 1024  # allowance for a prompt's tokens beside max_tokens
ENGINE_RESERVE = {"cuda": int(4 * GB), "cpu": int(1 * GB)}  # activations, CUDA context and graphs (vLLM), buffers
MARGIN = int(1 * GB)  # allocator slack beside dots' own tensors


def scratch_bytes(device: str, largest: int) -> int:
    from dots.vectors.synth import SCRATCH_BUFFERS, block_entries

    return SCRATCH_BUFFERS * block_entries(torch.device(device), largest) * 4


def resident_bytes(
    tensors: Mapping[str, TensorInfo],
    merged: list[str],
    extra: Mapping[str, int],
    tau: int,
    device: str,
    outputs: bool = True,
) -> int:
    """What `ResidentSynthesizer` holds: θ0 (every tensor) with the rows a source adds (`extra`
    bytes by name), τ̃ in its resident form (`tau` bytes, all sources), its float32 scratch,
    and — unless it writes straight into the engine's parameters (`outputs` False: the
    transformers engine in the checkpoint's dtype) — one output per merged tensor."""
    theta0 = sum(i.nbytes for i in tensors.values()) + sum(extra.get(n, 0) for n in merged)
    out = sum(tensors[n].nbytes + extra.get(n, 0) for n in merged) if outputs else 0
    largest = max((tensors[n].numel for n in merged), default=1)
    return theta0 + out + tau + scratch_bytes(device, largest)


def sharded_resident_bytes(
    tensors: Mapping[str, TensorInfo],
    merged: list[str],
    extra: Mapping[str, int],
    tau: int,
    device: str,
    tensor_parallel: int,
) -> int:
    """About the most `dots.engines.vllm_resident.ShardedResident` holds in one vLLM worker: its
    1/tensor_parallel share of θ0 of the merged tensors (with added rows) and of the compact τ̃,
    plus either one output buffer of the largest shard (layers whose live weight differs from
    its load-time layout, as vLLM-CPU's packed GEMMs) and the float32 scratch at a swap, or,
    while it is set up, a second copy of the θ0 shard (vLLM's loader places one source at a
    time into scratch parameters) — whichever is larger. Replicated tensors (norms) are
    counted once over all ranks: small beside the rest."""
    tp = max(1, tensor_parallel)
    theta0 = sum(tensors[n].nbytes + extra.get(n, 0) for n in merged)
    largest = max((tensors[n].nbytes + extra.get(n, 0) for n in merged), default=0)
    entries = max((tensors[n].numel for n in merged), default=1)
    swap = largest // tp + scratch_bytes(device, max(1, entries // tp))
    return (theta0 + tau) // tp + max(swap, theta0 // tp)


def stream_bytes(
    tensors: Mapping[str, TensorInfo],
    merged: list[str],
    extra: Mapping[str, int],
    tau_of: Mapping[str, int],
    device: str,
) -> int:
    """Peak of `synthesize` for one tensor: its θ0 and output, the output with a source's
    added rows (concatenated: one more copy), every source's compact τ̃ of it (`tau_of`
    bytes by name), + the float32 scratch. The largest such tensor."""
    peak, largest, merged_set = 0, 1, set(merged)
    for name in merged:
        info = tensors[name]
        added = extra.get(name, 0)
        own = 2 * info.nbytes + (info.nbytes + added if added else 0) + tau_of.get(name, 0)
        peak, largest = max(peak, own), max(largest, info.numel)
    copied = max((i.nbytes for n, i in tensors.items() if n not in merged_set), default=0)
    return max(peak, copied) + scratch_bytes(device, largest)
