"""The allocator setting of the command-line executors (dots.runtime.allocator)."""

import platform

import pytest

KEPT_PROBE = """
import sys, torch
from dots.runtime.allocator import reuse_freed_memory

def anon_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:")) / 1024

if sys.argv[1] == "reuse":
    assert reuse_freed_memory() is True and reuse_freed_memory() is True  # applied, and idempotent
base = anon_mb()
a = torch.ones(64_000_000); del a  # 256 MB allocated and freed
print(anon_mb() - base)
"""


def kept_after_free(mode: str) -> float:
    """MB of a freed 256 MB tensor that stay in a fresh process, with glibc's defaults or after
    `reuse_freed_memory`."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", KEPT_PROBE, mode], capture_output=True, text=True, check=True)
    return float(run.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_reuse_freed_memory_applies_on_glibc():
    """With glibc's defaults a freed large tensor is unmapped at once; once the setting applies, its
    pages stay in the process for the next tensor of that size."""
    assert kept_after_free("default") < 50
    assert kept_after_free("reuse") > 200


PROBE = """
import torch
from dots.runtime.allocator import freeing_as_it_goes, reuse_freed_memory

def anon_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:")) / 1024

assert reuse_freed_memory()
base = anon_mb()
a = torch.ones(64_000_000); del a  # 256 MB, freed: kept on the heap for reuse
kept = anon_mb() - base
with freeing_as_it_goes():
    b = torch.ones(96_000_000); del b  # 384 MB, freed inside: given back at once
    inside = anon_mb() - base
after = anon_mb() - base  # leaving gives back what the heap held free
c = torch.ones(64_000_000); del c  # the reuse setting holds again
again = anon_mb() - base
print(kept, inside, after, again)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt / malloc_trim are glibc's")
def test_freeing_as_it_goes_gives_back_what_a_one_off_phase_frees():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    kept, inside, after, again = map(float, out.split())
    assert kept > 200  # reuse mode: a freed 256 MB stays in the process
    assert inside < kept + 50  # inside: the freed 384 MB did not stay
    assert after < 50  # leaving returned the heap's free pages
    assert again > 200  # and freed memory is kept for reuse again
