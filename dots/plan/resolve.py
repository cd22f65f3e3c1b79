"""An engine given `synth_cache: auto` without a plan (built directly, as a library): resident,
in the fastest form that fits, when θ0 and its actual τ̃ fit in what its device has free now.
And the model shapes a plan is made for (`model_shapes`: a config.json, a local checkpoint, or
a Hub config)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from dots.errors import DotsError
from dots.plan.devices import meminfo
from dots.plan.estimate import GB, MARGIN, resident_bytes, sharded_resident_bytes
from dots.vectors.forms import BY_SPEED

log = logging.getLogger(__name__)


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


def model_shapes(cfg: Any, shapes: str | None):
    """The ModelShapes the plan uses: `--shapes`, a local base (+ sources), or a Hub config."""
    from pathlib import Path

    from dots.io.shapes import ModelShapes

    if shapes:
        return ModelShapes.from_config_file(shapes)
    base = str(cfg.backbone.base)
    if Path(base).expanduser().is_dir():
        from dots.io.align import align
        from dots.io.checkpoint import Checkpoint

        sources = {str(k): Checkpoint(str(v)) for k, v in cfg.backbone.sources.items()}
        return ModelShapes.from_alignment(align(Checkpoint(base), sources))
    from huggingface_hub import hf_hub_download

    try:
        config = hf_hub_download(base, "config.json", revision=cfg.backbone.get("revision"))
    except Exception as exc:  # offline, unknown repo, ...
        raise DotsError(f"cannot read {base}'s config.json ({str(exc).splitlines()[0]}); give --shapes") from None
    return ModelShapes.from_config_file(config)
