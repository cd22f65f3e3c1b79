"""What does dots do on a GPU node? The CUDA tests, the doctor, the lab search and the per-form
swap table in one command, one Markdown results file (results: benchmarks/results/gpu.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {"check": Variant("benchmarks/gpu/check.sh", "[--cpu-smoke] [--list] [results.md]: the whole check")}

SMOKE = [["check", "--cpu-smoke", "--list"]]
