"""`python -m benchmarks.gpu VARIANT [options]`: the variants of benchmarks/gpu/__init__.py."""

from benchmarks.gpu import VARIANTS, __doc__
from benchmarks.harness.entry import dispatch

if __name__ == "__main__":
    dispatch("gpu", __doc__ or "", VARIANTS)
