"""The allocator setting of the command-line executors (dots.memory)."""
import platform

import pytest
import torch

from dots.memory import reuse_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_reuse_freed_memory_applies_on_glibc():
    assert reuse_freed_memory() is True
    assert reuse_freed_memory() is True  # idempotent
    a = torch.ones(20_000_000)  # 80 MB: would be mmap'ed by default, now served from the heap
    total = float(a.sum())
    del a
    b = torch.zeros(20_000_000)
    assert total == 20_000_000 and float(b.sum()) == 0.0
