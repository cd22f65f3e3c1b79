"""Where an engine keeps θ0 and τ̃, decided with the forms it can hold them in (`dots.vectors.forms`).

The bytes a run needs per device: θ0 and τ̃ held resident in a form (transformers: the whole
model; vLLM: each worker's shard), or one tensor at a time read from the cache, and the
allowances beside the engine — the engine's declared needs, which the memory plan (`dots.plan`)
adds up before the engine starts. An engine given `synth_cache: auto` without a plan (built
directly, as a library) resolves it here when it receives its task vectors (`resolve_resident`):
resident, in the fastest form whose θ0 and actual τ̃ fit in what its device has free now.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import torch

from dots.errors import DotsError
from dots.io.safetensors import TensorInfo
from dots.runtime.devices import meminfo
from dots.vectors.forms import BY_SPEED

__all__ = [
    "ENGINE_RESERVE",
    "MARGIN",
    "PROMPT_TOKENS",
    "check_synth_cache",
    "free_bytes",
    "resident_bytes",
    "resident_needs",
    "resolve_resident",
    "resolve_synth_cache",
    "sharded_resident_bytes",
    "stream_bytes",
    "tau_bytes_per_form",
    "scratch_bytes",
]

log = logging.getLogger(__name__)

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
    """About the most `dots.engines.vllm.resident.ShardedResident` holds in one vLLM worker: its
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


SYNTH_CACHES = ("auto", "disk", "memory")


def check_synth_cache(value: str) -> str:
    """Where an engine keeps θ0 and τ̃ for swap_coefficients. disk: read from the τ̃ cache at
    every swap (memory: a few tensors); memory: held on the engine's device once
    (transformers: ResidentSynthesizer, ≈ 2×base + K compact τ̃, 0.725 bytes per parameter
    each for bf16 at density 0.3; vLLM: each worker its shard of base + K compact τ̃, in its
    parameters' layout, `dots.engines.vllm.resident`); auto: memory when it fits, else
    disk — decided by the search's memory plan before the engine starts (`dots.plan`),
    or by the engine from its device's free memory when it gets its task vectors."""
    if value not in SYNTH_CACHES:
        raise DotsError(f"engine.synth_cache must be one of {', '.join(SYNTH_CACHES)}, got {value!r}")
    return value


def tau_bytes_per_form(task_vectors: Any, base: Any = None) -> dict[str, int]:
    """Bytes of the K τ̃ of `task_vectors` in each resident form (what a swap reads of τ̃):
    dense 4 per entry, sparse 8 and index 4 + itemsize per kept entry, bitmask the cache's.
    `base`: the base Checkpoint when the caller has it open."""
    from dots.io.checkpoint import Checkpoint

    base = base if base is not None else Checkpoint(task_vectors.base_path)
    names, entries = task_vectors.names, task_vectors.entries.values()
    itemsize = base.info(names[0]).dtype.itemsize if names else 2
    return {
        "dense": 4 * sum(base.info(n).numel for n in names) * len(task_vectors.entries),
        "sparse": sum(8 * int(e.meta["kept"]) for e in entries),
        "index": sum((4 + itemsize) * int(e.meta["kept"]) for e in entries),
        "bitmask": sum(e.tau_bytes(names) for e in entries),
    }


def resident_needs(task_vectors: Any, device: torch.device, shards: int | None = None) -> dict[str, int]:
    """Bytes θ0 and the actual τ̃ of `task_vectors` need resident, per resident form (dense,
    sparse, index, bitmask). `shards`: a vLLM worker, one of that many tensor-parallel ranks, holding
    only its shard (`sharded_resident_bytes`); None: the whole model (`resident_bytes`) on the
    transformers engine, written into its parameters."""
    from dots.io.checkpoint import Checkpoint

    base = Checkpoint(task_vectors.base_path)
    tensors = {n: base.info(n) for n in base.names}
    extra = {
        n: rows.numel() * rows.element_size()
        for n in task_vectors.names
        if (rows := task_vectors.extra_rows(n)) is not None
    }
    taus = tau_bytes_per_form(task_vectors, base)
    if shards is None:
        return {f: resident_bytes(tensors, task_vectors.names, extra, t, device.type, False) for f, t in taus.items()}
    return {
        f: sharded_resident_bytes(tensors, task_vectors.names, extra, t, device.type, shards) for f, t in taus.items()
    }


def free_bytes(device: torch.device) -> int:
    """What `device` has free now: CUDA's free memory + what torch's allocator holds unused, or
    the host's MemAvailable."""
    if device.type == "cuda":
        return (
            torch.cuda.mem_get_info(device)[0]
            + torch.cuda.memory_reserved(device)
            - torch.cuda.memory_allocated(device)
        )
    return meminfo().get("MemAvailable", 0)


def resolve_resident(
    synth_cache: str, resident_form: str, task_vectors: Any, device: torch.device, shards: int | None = None
) -> tuple[str, str]:
    """(synth_cache, resident form) for an engine without a plan: `auto` → the fastest form
    (dense, sparse, index, bitmask) whose θ0 and τ̃ fit in what `device` has free now (with MARGIN),
    else disk; a form given explicitly is used as given. Logs which and why."""
    if task_vectors is None or synth_cache == "disk":
        return synth_cache, resident_form
    if synth_cache == "memory" and resident_form != "auto":
        return synth_cache, resident_form
    needs = resident_needs(task_vectors, device, shards)
    free = free_bytes(device)
    forms = list(BY_SPEED) if resident_form == "auto" else [resident_form]
    fitting = [f for f in forms if needs[f] + MARGIN <= free]
    if fitting:
        choice = ("memory", fitting[0])
    else:  # synth_cache=memory asks for a resident copy whatever it costs: the smallest
        choice = ("memory", forms[-1]) if synth_cache == "memory" else ("disk", resident_form)
    log.info(
        "synth_cache=%s, resident_form=%s → %s, %s: resident needs %s; %s has %.2f GB free",
        synth_cache,
        resident_form,
        *choice,
        ", ".join(f"{f} {needs[f] / GB:.2f} GB" for f in forms),
        device,
        free / GB,
    )
    return choice


def resolve_synth_cache(value: str, task_vectors: Any, device: torch.device, shards: int | None = None) -> str:
    """`auto` → memory when θ0 and τ̃ fit in some resident form in what `device` has free now,
    else disk (`resolve_resident`). Other values pass through."""
    return resolve_resident(value, "auto", task_vectors, device, shards)[0]
