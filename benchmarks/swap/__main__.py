"""`python -m benchmarks.swap VARIANT [options]`: the variants of benchmarks/swap/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.swap import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("swap", __doc__ or "", VARIANTS)
