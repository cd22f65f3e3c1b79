"""`python -m benchmarks.pick VARIANT [options]`: the variants of benchmarks/pick/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.pick import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("pick", __doc__ or "", VARIANTS)
