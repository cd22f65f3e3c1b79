"""`python -m benchmarks.versions VARIANT [options]`: the variants of benchmarks/versions/__init__.py."""

from benchmarks.harness.entry import dispatch
from benchmarks.versions import VARIANTS, __doc__

if __name__ == "__main__":
    dispatch("versions", __doc__ or "", VARIANTS)
