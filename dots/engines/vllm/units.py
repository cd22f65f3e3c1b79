"""A vLLM worker's parameters as units dots writes: each parameter (or fused parameter) with its
load-time layout and owners (`model_units`), vLLM's loader run into scratch copies of them
(`place`), which models the resident form cannot hold (`unsupported`), and which modules must
re-run vLLM's post-load processing after a write (`modules_to_process`). vLLM's internals only
through `dots.engines.vllm.compat`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from dots.engines.vllm import compat
from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import TaskVectors

__all__ = ["Unit", "unsupported"]

# a loader may cast what it receives up to the parameter's dtype; these casts are exact
EXACT_UPCASTS = {(torch.bfloat16, torch.float32), (torch.float16, torch.float32)}


class Unsupported(Exception):
    """This model or cache cannot be held in the parameters' layout (the message says why)."""


@dataclass
class Unit:
    """One live parameter (shared by every module it is tied to) and its load-time layout."""

    name: str
    kernel: torch.Tensor  # the live tensor the engine computes with
    owners: list[tuple[torch.nn.Module, str]]  # (module, attribute) slots holding it
    meta: torch.Tensor  # its load-time layout on the meta device, with the loader attributes
    meta_owner: torch.nn.Module  # the module whose loader methods `meta` carries
    direct: bool  # kernel has the load-time layout and dtype: written in place


def model_units(model: torch.nn.Module) -> list[Unit]:
    """Every floating parameter of the model once, with the layout vLLM loads it in (its
    reload metadata, recorded when the model was built) and the modules that hold it."""
    units: dict[int, Unit] = {}
    for mod_name, module in model.named_modules():
        restore = compat.load_time_layout(module)
        for attr, kernel in module._parameters.items():
            if kernel is None or not kernel.is_floating_point():
                continue
            unit = units.get(id(kernel))
            if unit is not None:
                unit.owners.append((module, attr))
                continue
            meta = restore.get(attr)
            if meta is None:  # not transformed at load (e.g. `bias`, never put on meta by vLLM)
                meta = compat.to_meta_tensor(kernel)
            direct = tuple(kernel.shape) == tuple(meta.shape) and kernel.dtype == meta.dtype and kernel.is_contiguous()
            units[id(kernel)] = Unit(f"{mod_name}.{attr}".lstrip("."), kernel, [(module, attr)], meta, module, direct)
    return list(units.values())


def swap_in(units: list[Unit], tensors: list[torch.Tensor | None]) -> None:
    """Put `tensors[j]` in every slot of `units[j]` (None: leave the slot)."""
    for unit, tensor in zip(units, tensors):
        if tensor is not None:
            for module, attr in unit.owners:
                module._parameters[attr] = tensor  # type: ignore[assignment]


def restore_layout(units: list[Unit]) -> None:
    for unit in units:
        for module, attr in unit.owners:
            module._parameters[attr] = unit.kernel  # type: ignore[assignment]


def place(model: torch.nn.Module, units: list[Unit], weights: Iterator[tuple[str, torch.Tensor]], config: Any):
    """Load `weights` (checkpoint naming) with vLLM's own loader into fresh copies of every
    parameter in its load-time layout; returns those copies (the live parameters are left as
    they were). Entries no weight reaches keep the live value (direct) or 0."""
    scratch: list[torch.Tensor | None] = []
    for unit in units:
        data = torch.zeros(unit.meta.shape, dtype=unit.meta.dtype, device=unit.kernel.device)
        if unit.direct:
            data.copy_(unit.kernel)
        scratch.append(compat.dress_as_loaded(unit.meta, unit.meta_owner, data))
    swap_in(units, scratch)
    try:
        compat.load_weights(model, config, weights)
    finally:
        restore_layout(units)
    return scratch


def unsupported(tv: TaskVectors, base: Checkpoint, units: list[Unit], quantized: bool) -> str | None:
    """Why θ0 and τ̃ cannot be held in the parameters' layout, or None when they can."""
    if quantized:
        return "the model is quantized"
    dtypes = {base.info(n).dtype for n in tv.names}
    if len(dtypes) > 1:
        return f"the merged tensors have several dtypes {sorted(map(str, dtypes))}"
    if dtypes:
        dtype = dtypes.pop()
        narrow = [u for u in units if u.meta.dtype != dtype and (dtype, u.meta.dtype) not in EXACT_UPCASTS]
        if narrow:
            return f"{narrow[0].name} is {narrow[0].meta.dtype}, which does not hold the checkpoint's {dtype} exactly"
    tensor_gamma = [k for k, e in tv.entries.items() if e.meta.get("rescale") == "tensor"]
    if tensor_gamma:
        return f"source(s) {tensor_gamma} use rescale=tensor (a fused parameter would mix several γ)"
    return None


def owned_by(unit: Unit, module: torch.nn.Module) -> bool:
    return any(m is module for m, _ in unit.owners)


def modules_to_process(units: list[Unit], keep: list[bool], cpu: bool) -> list[torch.nn.Module]:
    """Modules holding a written parameter whose kernel derives from their weights: on vLLM-CPU
    every GEMM layer (`cpu_linear`, its packed handle), anywhere a layer whose live tensor
    differs from its load-time layout."""
    written = dict.fromkeys(m for u, k in zip(units, keep) if k for m, _ in u.owners)
    transformed = {id(m) for u in units if not u.direct for m, _ in u.owners}
    return [m for m in written if (cpu and compat.has_cpu_gemm(m)) or id(m) in transformed]
