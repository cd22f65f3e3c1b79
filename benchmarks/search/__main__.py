"""`python -m benchmarks.search VARIANT [options]`: the variants of benchmarks/search/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.search import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("search", __doc__ or "", VARIANTS)
