"""Timers that stop when the device has finished the work, not when the call returns.

A CUDA call returns once its kernels are queued: a timer that stops there measures the launch,
and the work lands in whatever is timed next (a swap's in the perplexity of its trial, #38).
Every swap time dots reports (the scorer's `time_swap`, the doctor, the engines' own splits,
the benchmarks) is taken with `DeviceTimer`, which waits for the device at both ends: on CUDA
`torch.cuda.synchronize`, on the CPU nothing (the work is done when the call returns).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

__all__ = ["DeviceTimer", "device_of", "race", "wait_for", "waiter"]


def waiter(device: Any) -> Callable[[], None]:
    """What waits until the work queued on `device` is done: a stand-in's own `synchronize`
    (tests), `torch.cuda.synchronize` on CUDA, the device module's on other accelerators, and
    nothing on the CPU or for None (an engine in other processes waits there itself)."""
    own = getattr(device, "synchronize", None)
    if callable(own):
        return own
    if device is None:
        return _nothing
    kind = torch.device(device)
    if kind.type == "cpu":
        return _nothing
    if kind.type == "cuda":
        return lambda: torch.cuda.synchronize(kind)
    module = torch.get_device_module(kind.type)
    return getattr(module, "synchronize", _nothing)


def _nothing() -> None:
    return None


def wait_for(device: Any) -> None:
    """Block until `device` has finished everything queued on it."""
    waiter(device)()


class DeviceTimer:
    """`with DeviceTimer(device) as t: work()` — `t.seconds` from the moment the device was idle
    to the moment it finished `work` (`started`, `stopped`: the `time.perf_counter` stamps)."""

    def __init__(self, device: Any = None):
        self._wait = waiter(device)
        self.started = self.stopped = 0.0

    def __enter__(self) -> DeviceTimer:
        self._wait()  # work queued before is not this block's
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._wait()
        self.stopped = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.stopped - self.started


def device_of(engine: Any) -> Any:
    """The device whose work an engine's calls queue (`engine.device`; None for an engine whose
    workers wait for their own device before they answer, as vLLM's swap does)."""
    return getattr(engine, "device", None)


def race(
    first: Callable[[], object], second: Callable[[], object], device: Any, rounds: int = 3
) -> tuple[float, float]:
    """The shortest of `rounds` device-timed runs of each of two ways to do the same work, taken in
    turns after one untimed run of each (compiling, caches): (first's seconds, second's)."""
    best = [math.inf, math.inf]
    for turn in range(rounds + 1):
        for i, work in enumerate((first, second)):
            with DeviceTimer(device) as timer:
                work()
            if turn:
                best[i] = min(best[i], timer.seconds)
    return best[0], best[1]
