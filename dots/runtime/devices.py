"""What the devices have: free and total bytes of the engine's GPUs (NVML, else torch) or of
the host (/proc/meminfo)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from dots.errors import DotsError

__all__ = ["DeviceMemory", "device_memory", "meminfo"]


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
        info = meminfo()
        return DeviceMemory(info.get("MemAvailable", 0), info.get("MemTotal", 0), "measured (host MemAvailable)")
    visible = torch.cuda.device_count()
    if visible < count:
        raise DotsError(f"memory plan: the engine needs {count} GPU(s), {visible} visible")
    pairs = _nvml_memory(count) or [torch.cuda.mem_get_info(i) for i in range(count)]
    return DeviceMemory(min(f for f, _ in pairs), min(t for _, t in pairs), f"measured on {count} GPU(s)")


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (MemTotal, MemAvailable, ...); the physical memory where there is none."""
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
