"""Process-wide allocator setting for the streaming executors (merge, analyze, synthesis).

Each tensor of a model is allocated, used and freed in turn. glibc serves allocations
above 32 MiB with a fresh `mmap` and unmaps them on free, so every large tensor is
faulted in page by page again (4 KiB at a time: 0.19 s of faults for a 0.5 GB tensor
that takes 0.04 s to fill, measured on a 2-core VM). `reuse_freed_memory` makes glibc
serve everything from its heap and keep what is freed, so the next tensor of the same
size reuses pages already mapped. Peak RSS grows a little (freed memory is not returned
before exit); only the command-line entry points and engine workers call it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
_done = False


def reuse_freed_memory() -> bool:
    """Tell glibc malloc to keep freed memory for reuse (no-op elsewhere). True if applied."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    _done = ok
    log.debug("glibc malloc: keep freed memory for reuse: %s", ok)
    return ok
