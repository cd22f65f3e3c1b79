"""Do two versions of dots agree? Byte identity of merges, searches, exports and caches between
two commits, and the data-loss reproductions of #25 against a given dots (results:
benchmarks/results/versions.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "bytes": Variant("benchmarks.versions.bytes", "same merges, search, export and caches from two commits"),
    "data-safety": Variant("benchmarks.versions.data_safety", "CODE WORKDIR: the three data-loss cases of #25"),
}

SMOKE: list[list[str]] = []
SLOW_SMOKE = [["bytes", "--quick", "--before", "HEAD", "--after", "HEAD"]]
