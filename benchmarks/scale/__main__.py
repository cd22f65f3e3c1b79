"""`python -m benchmarks.scale VARIANT [options]`: the variants of benchmarks/scale/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.scale import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("scale", __doc__ or "", VARIANTS)
