"""`python -m benchmarks.grading VARIANT [options]`: the variants of benchmarks/grading/__init__.py."""

from benchmarks.grading import VARIANTS, __doc__
from benchmarks.harness.entry import dispatch

if __name__ == "__main__":
    dispatch("grading", __doc__ or "", VARIANTS)
