"""The memory plan of a search: what a run holds on each device beside the live engine, and
whether τ̃ stays resident (`synth_cache: memory`) or is read from the cache at every swap
(`disk`) — decided before the engine starts.

Per device (each GPU of the engine's tensor-parallel group; on CPU the host, shared by
every worker, so the per-worker figures count once per worker):

  engine weights    the model in the engine's dtype, split over tensor parallelism
  KV cache          the engine's minimum share: the k samples of one query at full length
                    (search.k × (PROMPT_TOKENS + max_tokens) tokens; the transformers engine:
                    its batch_size sequences), for vLLM at least one max_model_len sequence
                    (vLLM refuses to start with less); KV heads split over tensor parallelism
  engine reserve    activations, CUDA context and graphs: a fixed allowance (ENGINE_RESERVE)
  τ̃ resident        transformers: θ0 + one output buffer per merged tensor + K compact τ̃ +
                    scratch, what `dots.vectors.synth.ResidentSynthesizer` holds. vLLM: each
                    worker's shard of θ0 and of the K compact τ̃ of the merged tensors (divided
                    by tensor_parallel_size) + one output buffer of the largest such shard + the
                    scratch, what `dots.engines.vllm_resident.ShardedResident` holds: a swap
                    writes into the engine's own parameters (no output copy of the model)
  τ̃ from the cache  one tensor at a time (`dots.vectors.synth.synthesize`): the largest
                    tensor's θ0, output (+ rows a source adds) and K compact τ̃, + scratch

`synth_cache: auto` (the default) keeps τ̃ resident when engine + resident fit, else reads
it from the cache when engine + one tensor fit; a plan where neither fits stops with one
line giving the numbers. `memory` or `disk` given explicitly is checked the same way. With
vLLM on a GPU and `gpu_memory_utilization: null`, the plan also sets vLLM's share of each
device (vLLM fills its share with KV cache) so that what dots holds beside it fits, at most
vLLM's default 0.9. The compact τ̃ is estimated from the shapes and the density
(`dots.vectors.compact.estimate_bytes`, 1/8 + density·itemsize bytes per parameter), so a
plan needs neither the cache nor the weights — `python -m dots.plan` prints one from a
config.json alone.

An engine given `synth_cache: auto` without a plan (built directly, as a library) resolves
it when it receives its task vectors (`resolve_synth_cache`): resident if the actual
resident size fits in what its device has free at that moment.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from dots.errors import DotsError
from dots.io.safetensors import TensorInfo, dtype_size
from dots.io.shapes import ModelShapes
from dots.vectors.compact import estimate_bytes

log = logging.getLogger(__name__)

GB = 1e9
PROMPT_TOKENS = 1024  # allowance for a prompt's tokens beside max_tokens
ENGINE_RESERVE = {"cuda": int(4 * GB), "cpu": int(1 * GB)}  # activations, CUDA context and graphs (vLLM), buffers
MARGIN = int(1 * GB)  # allocator slack beside dots' own tensors
VLLM_MAX_UTILIZATION = 0.9  # vLLM's own default share of a GPU
SYNTH_CACHES = ("auto", "disk", "memory")


# --- what the plan reads ------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSetting:
    """The engine config (conf/engine/*.yaml) and search options the plan depends on."""

    name: str  # vllm | hf
    device: str  # cuda | cpu
    tensor_parallel: int = 1
    dtype: torch.dtype | None = None  # weights and KV; None: the checkpoint's
    utilization: float | None = None  # vLLM's gpu_memory_utilization as configured
    max_model_len: int | None = None  # vLLM's; None: the model's max_position_embeddings
    sequences: int = 8  # sequences whose KV must fit at once (search.k; hf: batch_size)
    max_tokens: int = 1024  # generated tokens per sequence (search.max_tokens)
    synth_cache: str = "auto"


@dataclass(frozen=True)
class DeviceMemory:
    """Free and total bytes of each device of the group (the smallest free one), and how known."""

    free: int
    total: int
    how: str


def device_memory(device: str, count: int = 1) -> DeviceMemory:
    """What the devices have now: CUDA (NVML when importable, so this process creates no CUDA
    context; else torch) or the host's available memory."""
    if device == "cpu":
        info = _meminfo()
        return DeviceMemory(info.get("MemAvailable", 0), info.get("MemTotal", 0), "measured (host MemAvailable)")
    visible = torch.cuda.device_count()
    if visible < count:
        raise DotsError(f"memory plan: the engine needs {count} GPU(s), {visible} visible")
    pairs = _nvml_memory(count) or [torch.cuda.mem_get_info(i) for i in range(count)]
    return DeviceMemory(min(f for f, _ in pairs), min(t for _, t in pairs), f"measured on {count} GPU(s)")


def _meminfo() -> dict[str, int]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"MemTotal": total, "MemAvailable": total}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def _nvml_memory(count: int) -> list[tuple[int, int]] | None:
    """(free, total) of the first `count` visible GPUs by NVML, None when it cannot say."""
    try:
        import pynvml  # type: ignore[import-not-found]  # nvidia-ml-py, a vLLM (GPU) dependency
    except ImportError:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [int(x) for x in visible.split(",")[:count]] if visible and visible.replace(",", "").isdigit() else None
    try:
        pynvml.nvmlInit()
        pairs = []
        for i in range(count):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(ids[i] if ids else i))
            pairs.append((int(info.free), int(info.total)))
        return pairs
    except Exception:  # NVML absent or unusable: torch measures instead
        return None


# --- what a run needs ----------------------------------------------------------------------


def scratch_bytes(device: str, largest: int) -> int:
    from dots.vectors.synth import SCRATCH_BUFFERS, block_entries

    return SCRATCH_BUFFERS * block_entries(torch.device(device), largest) * 4


def resident_bytes(
    tensors: Mapping[str, TensorInfo],
    merged: list[str],
    extra: Mapping[str, int],
    tau: int,
    device: str,
) -> int:
    """What `ResidentSynthesizer` holds: θ0 (every tensor), one output per merged tensor
    (with the rows a source adds, `extra` bytes by name), the compact τ̃ (`tau` bytes, all
    sources) and its float32 scratch."""
    theta0 = sum(i.nbytes for i in tensors.values())
    outputs = sum(tensors[n].nbytes + extra.get(n, 0) for n in merged)
    largest = max((tensors[n].numel for n in merged), default=1)
    return theta0 + outputs + tau + scratch_bytes(device, largest)


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


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of the engine and of each way to hold τ̃, and the choice made."""

    shapes: ModelShapes
    setting: EngineSetting
    memory: DeviceMemory
    sources: int
    density: float
    dtype: torch.dtype  # the engine's weights and KV
    weights: int
    kv: int
    kv_tokens: int
    kv_note: str
    reserve: int
    tau: int  # the K compact τ̃ (part of `resident`)
    resident: int
    stream: int
    synth_cache: str  # memory | disk
    utilization: float | None  # vLLM's gpu_memory_utilization to start with (None: not vLLM on a GPU)
    reason: str

    @property
    def engine(self) -> int:
        return self.weights + self.kv + self.reserve

    def engine_options(self, engine_cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The engine config with the plan applied: synth_cache chosen, vLLM's share set."""
        out = dict(engine_cfg)
        out["synth_cache"] = self.synth_cache
        if self.utilization is not None and out.get("gpu_memory_utilization") is None:
            out["gpu_memory_utilization"] = round(self.utilization, 4)
        return out

    def lines(self) -> list[str]:
        s, m = self.setting, self.memory
        dtype = str(self.dtype).replace("torch.", "")
        groups = f"{s.tensor_parallel} devices" if s.tensor_parallel > 1 else "1 device"
        theta0 = self.shapes.nbytes
        outputs = sum(self.shapes.tensors[n].nbytes + self.shapes.extra_bytes(n) for n in self.shapes.merged)
        if s.name == "vllm":  # each worker: its shard of the merged tensors, written into its parameters
            tp = max(1, s.tensor_parallel)
            held = (outputs // tp, self.tau // tp)
            resident = (
                f"θ0 {held[0] / GB:.2f} + {self.sources} compact τ̃ {held[1] / GB:.2f} + set-up or swap buffers "
                f"{(self.resident - sum(held)) / GB:.2f} (this worker's shard: / tensor_parallel_size {tp})"
            )
        else:
            resident = (
                f"θ0 {theta0 / GB:.2f} + outputs {outputs / GB:.2f} + {self.sources} compact τ̃ {self.tau / GB:.2f} "
                f"+ scratch {(self.resident - theta0 - outputs - self.tau) / GB:.2f} (whole model)"
            )
        out = [
            f"memory plan: {self.shapes.name} ({self.shapes.params / 1e9:.2f} B parameters), {self.sources} sources "
            f"at density {self.density:g}; engine {s.name} on {s.device}, {groups} of {m.total / GB:.1f} GB, "
            f"{m.free / GB:.1f} GB free ({m.how}); per device:",
            f"  engine weights     {self.weights / GB:8.2f} GB  the model in {dtype} "
            f"/ tensor_parallel_size {s.tensor_parallel}",
            f"  engine KV cache    {self.kv / GB:8.2f} GB  at least {self.kv_tokens} tokens ({self.kv_note})",
            f"  engine reserve     {self.reserve / GB:8.2f} GB  activations, CUDA context, graphs",
            f"  τ̃ resident         {self.resident / GB:8.2f} GB  {resident}",
            f"  τ̃ from the cache   {self.stream / GB:8.2f} GB  one tensor at a time; each swap reads θ0 "
            f"{theta0 / GB:.2f} + τ̃ {self.tau / GB:.2f} GB from the cache (page cache when the host holds them)",
            f"  → synth_cache={self.synth_cache}: {self.reason}",
        ]
        if self.utilization is not None:
            kv = self.utilization * m.total - self.weights - self.reserve
            per_token = self.kv / max(self.kv_tokens, 1)
            out.append(
                f"  → vLLM gpu_memory_utilization {self.utilization:.2f}: its KV cache ≈ {kv / GB:.1f} GB "
                f"≈ {kv / per_token / 1e3:.0f}k tokens" + ("" if s.utilization is None else " (as configured)")
            )
        return out


def plan_memory(
    shapes: ModelShapes,
    setting: EngineSetting,
    memory: DeviceMemory,
    sources: int,
    density: float,
    tau_bytes: int | None = None,
) -> MemoryPlan:
    """The plan for `sources` task vectors of `shapes` at `density` beside `setting`'s engine on
    devices with `memory`; `tau_bytes` (all sources) when the cache exists, else estimated.
    A DotsError (one line, the numbers) when the requested synth_cache cannot fit."""
    if setting.synth_cache not in SYNTH_CACHES:
        raise DotsError(f"synth_cache must be one of {SYNTH_CACHES}, got {setting.synth_cache!r}")
    tp = max(1, setting.tensor_parallel)
    dtype = setting.dtype or next(iter(shapes.tensors.values())).dtype
    weights = sum(i.numel * dtype_size(dtype) for i in shapes.tensors.values())
    weights = (weights + sum(shapes.extra_bytes(n) for n in shapes.extra_rows)) // tp
    per_token = shapes.kv_bytes_per_token(dtype, tp)
    seq = PROMPT_TOKENS + setting.max_tokens
    if setting.name == "vllm":
        limit = setting.max_model_len or shapes.max_position or seq
        tokens = max(limit, setting.sequences * min(seq, limit))
        note = f"max(max_model_len {limit}, k={setting.sequences} × {min(seq, limit)})"
    else:
        tokens = setting.sequences * seq
        note = f"batch_size {setting.sequences} × {seq}"
    kv = tokens * per_token
    itemsize = dtype_size(shapes.source_dtype)
    tau_of = {n: sources * estimate_bytes(shapes.tensors[n].numel, density, itemsize) for n in shapes.merged}
    tau = tau_bytes if tau_bytes is not None else sum(tau_of.values())
    extra = {n: shapes.extra_bytes(n) for n in shapes.extra_rows}
    if setting.name == "vllm":
        resident = sharded_resident_bytes(shapes.tensors, shapes.merged, extra, tau, setting.device, tp)
    else:
        resident = resident_bytes(shapes.tensors, shapes.merged, extra, tau, setting.device)
    stream = stream_bytes(shapes.tensors, shapes.merged, extra, tau_of, setting.device)
    reserve = ENGINE_RESERVE.get(setting.device, ENGINE_RESERVE["cuda"])
    choice, utilization, reason = _decide(setting, memory, weights + kv + reserve, resident, stream)
    return MemoryPlan(
        shapes, setting, memory, sources, density, dtype, weights, kv, tokens, note, reserve, tau, resident, stream,
        choice, utilization, reason,
    )  # fmt: skip


def _decide(
    setting: EngineSetting, memory: DeviceMemory, engine: int, resident: int, stream: int
) -> tuple[str, float | None, str]:
    """(synth_cache, vLLM utilization or None, why) — or a one-line DotsError."""
    vllm_gpu = setting.name == "vllm" and setting.device == "cuda"
    workers = max(1, setting.tensor_parallel) if setting.device == "cpu" else 1  # they share the host
    need = {"memory": resident, "disk": stream}
    share = setting.utilization * memory.total if vllm_gpu and setting.utilization is not None else None
    if share is not None and share < engine:
        raise DotsError(
            f"memory plan: vLLM's share (gpu_memory_utilization {setting.utilization} × {memory.total / GB:.1f} GB "
            f"= {share / GB:.1f} GB) is less than its weights + minimum KV cache + reserve ({engine / GB:.1f} GB)"
        )

    def room(choice: str) -> float:  # bytes left over on a device with this choice (< 0: does not fit)
        if share is not None:
            return memory.free - share - need[choice] - MARGIN
        return memory.free - workers * (engine + need[choice]) - MARGIN

    wanted = ["memory", "disk"] if setting.synth_cache == "auto" else [setting.synth_cache]
    fitting = [c for c in wanted if room(c) >= 0]
    if not fitting:
        last = wanted[-1]  # the smaller need: what would have had to fit
        label = {"memory": "τ̃ resident", "disk": "τ̃ from the cache"}
        engine_part = f"engine {engine / GB:.1f} GB" if share is None else f"vLLM's share {share / GB:.1f} GB"
        other = f" (resident: {resident / GB:.1f} GB)" if last == "disk" else ""
        per = f", × {workers} workers" if workers > 1 else ""
        total = share + need[last] if share is not None else workers * (engine + need[last])
        hint = "use synth_cache=auto or disk" if setting.synth_cache == "memory" else "use larger or more devices"
        raise DotsError(
            f"memory plan: does not fit on {setting.device}: {engine_part} + {label[last]} {need[last] / GB:.1f} GB"
            f"{other}{per} + margin {MARGIN / GB:.1f} GB = {(total + MARGIN) / GB:.1f} GB > "
            f"{memory.free / GB:.1f} GB free per device; {hint} (python -m dots.plan prints the whole plan)"
        )
    choice = fitting[0]
    utilization = None
    if vllm_gpu:
        utilization = setting.utilization
        if utilization is None:
            utilization = min(VLLM_MAX_UTILIZATION, (memory.free - need[choice] - MARGIN) / memory.total)
    beside = f"beside the engine's {engine / GB:.1f} GB" if share is None else f"beside vLLM's {share / GB:.1f} GB"
    if setting.synth_cache != "auto":
        reason = f"as configured ({need[choice] / GB:.1f} GB {beside} fits in {memory.free / GB:.1f} GB)"
    elif choice == "memory":
        reason = (
            f"θ0 and τ̃ resident ({resident / GB:.1f} GB) fit {beside} in {memory.free / GB:.1f} GB; "
            "swaps are arithmetic only"
        )
    else:
        reason = (
            f"θ0 and τ̃ resident would need {resident / GB:.1f} GB {beside}, {memory.free / GB:.1f} GB free; "
            f"read from the cache at every swap ({stream / GB:.1f} GB at a time)"
        )
    return choice, utilization, reason


# --- from configs ----------------------------------------------------------------------------


def engine_setting(
    engine_cfg: Mapping[str, Any], search_cfg: Mapping[str, Any], device: str | None = None
) -> EngineSetting:
    """The plan's view of conf/engine/*.yaml (+ search.k, search.max_tokens); `device`
    overrides where the engine would run (cuda when torch sees a GPU, else cpu)."""
    from dots.engines.factory import resolve_engine_name
    from dots.engines.hf import resolve_dtype

    name = resolve_engine_name(str(engine_cfg.get("name", "auto")))
    if device is None and name == "vllm":
        from dots.engines.vllm_env import on_cpu_platform

        device = "cpu" if on_cpu_platform() else "cuda"
    elif device is None:
        configured = engine_cfg.get("device")
        device = torch.device(configured).type if configured else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype(engine_cfg.get("dtype") or "auto")
    vllm = name == "vllm"
    return EngineSetting(
        name=name,
        device=device,
        tensor_parallel=int(engine_cfg.get("tensor_parallel_size") or 1) if vllm else 1,
        dtype=dtype if isinstance(dtype, torch.dtype) else None,
        utilization=engine_cfg.get("gpu_memory_utilization") if vllm else None,
        max_model_len=engine_cfg.get("max_model_len") if vllm else None,
        sequences=int(search_cfg.get("k", 8)) if vllm else int(engine_cfg.get("batch_size") or 16),
        max_tokens=int(search_cfg.get("max_tokens") or 1024),
        synth_cache=str(engine_cfg.get("synth_cache") or "auto"),
    )


def plan_search(
    cfg: Any, shapes: ModelShapes, memory: DeviceMemory | None = None, device: str | None = None
) -> MemoryPlan:
    """The plan of a composed search config (conf/search.yaml) for a model of `shapes`:
    memory measured on the engine's devices unless given."""
    from dots.plain import to_plain

    engine = to_plain(cfg.engine)
    setting = engine_setting(engine, to_plain(cfg.search), device)
    if memory is None:
        memory = device_memory(setting.device, setting.tensor_parallel)
    return plan_memory(shapes, setting, memory, len(cfg.backbone.sources), float(cfg.sparsify.density))


# --- an engine without a plan ---------------------------------------------------------------


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
        free = _meminfo().get("MemAvailable", 0)
    choice = "memory" if need + MARGIN <= free else "disk"
    log.info(
        "synth_cache=auto → %s: θ0 and τ̃ resident need %.2f GB, %s has %.2f GB free",
        choice,
        need / GB,
        device,
        free / GB,
    )
    return choice
