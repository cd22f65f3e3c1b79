"""What do large models cost? Merge and analyze against model size, analyze's memory at two
sizes, the τ̃ cache's bytes per parameter, and merges, searches and swaps at 7B / 70B tensor
shapes (results: benchmarks/results/scale.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "sizes": Variant("benchmarks.scale.sizes", "peak RSS and wall time of merge and analyze vs model size"),
    "analyze": Variant("benchmarks.scale.analyze", "peak RSS of python -m dots.analyze at two sizes"),
    "cache-bytes": Variant("benchmarks.scale.cache_bytes", "bytes per parameter of the τ̃ cache, dense vs compact"),
    "large": Variant("benchmarks.scale.large", "merge | search | classes at 7B / 70B tensor shapes"),
}

SMOKE = [["cache-bytes", "--lab-only", "--densities", "0.3", "--root", "{tmp}/cache-bytes"]]
