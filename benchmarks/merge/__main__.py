"""`python -m benchmarks.merge VARIANT [options]`: the variants of benchmarks/merge/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.merge import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("merge", __doc__ or "", VARIANTS)
