"""An engine given `synth_cache: auto` without a plan (built directly, as a library): resident
when θ0 and its actual τ̃ fit in what its device has free now. And the model shapes a plan is
made for (`model_shapes`: a config.json, a local checkpoint, or a Hub config)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from dots.errors import DotsError
from dots.plan.devices import meminfo
from dots.plan.estimate import GB, MARGIN, resident_bytes, sharded_resident_bytes

log = logging.getLogger(__name__)


def resolve_synth_cache(value: str, task_vectors: Any, device: torch.device, shards: int | None = None) -> str:
    """`auto` → memory when θ0 and the compact τ̃ of `task_vectors` fit in what `device` has
    free now (with MARGIN), else disk; logs which and why. Other values pass through.
    `shards`: a vLLM worker, one of that many tensor-parallel ranks, holding only its shard
    (`sharded_resident_bytes`); None: the whole model (`resident_bytes`)."""
    if value != "auto" or task_vectors is None:
        return value
    from dots.io.checkpoint import Checkpoint

    base = Checkpoint(task_vectors.base_path)
    tensors = {n: base.info(n) for n in base.names}
    extra = {
        n: rows.numel() * rows.element_size()
        for n in task_vectors.names
        if (rows := task_vectors.extra_rows(n)) is not None
    }
    tau = sum(e.tau_bytes(task_vectors.names) for e in task_vectors.entries.values())
    if shards is None:
        need = resident_bytes(tensors, task_vectors.names, extra, tau, device.type)
    else:
        need = sharded_resident_bytes(tensors, task_vectors.names, extra, tau, device.type, shards)
    if device.type == "cuda":  # what the driver has free + what torch's allocator holds unused
        free = (
            torch.cuda.mem_get_info(device)[0]
            + torch.cuda.memory_reserved(device)
            - torch.cuda.memory_allocated(device)
        )
    else:
        free = meminfo().get("MemAvailable", 0)
    choice = "memory" if need + MARGIN <= free else "disk"
    log.info(
        "synth_cache=auto → %s: θ0 and τ̃ resident need %.2f GB, %s has %.2f GB free",
        choice,
        need / GB,
        device,
        free / GB,
    )
    return choice


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
