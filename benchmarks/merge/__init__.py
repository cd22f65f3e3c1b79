"""What does a merge cost? `python -m dots.merge` in memory and time at two sizes, against the
machine's disk and memory floors, and against mergekit (results: benchmarks/results/merge.md).

A new way of measuring a merge (for example the cost of crash-safe writes, merge and export side
by side) is one more module here and one more entry of VARIANTS."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "memory": Variant("benchmarks.merge.memory", "peak RSS and wall time of a streaming ties merge at two sizes"),
    "limits": Variant("benchmarks.merge.limits", "the merge against this machine's disk and memory bandwidth"),
    "mergekit": Variant("benchmarks.merge.mergekit", "dots vs mergekit: wall time, peak RSS, merged tensors"),
    "commit": Variant("benchmarks.merge.commit", "the cost of crash-safe writes: merge, export, swap at two commits"),
}

SMOKE: list[list[str]] = []
SLOW_SMOKE = [["memory", "--sizes", "0.01", "--runs", "1", "--root", "{tmp}/merge", "--machine", "test"]]
