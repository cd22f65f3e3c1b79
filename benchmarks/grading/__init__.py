"""Does dots grade as the truth does? dots' grader against the graders the field uses (each in a
venv of its own) and against an older dots, on gold renderings, handwritten cases and the lab's
completions (results: benchmarks/results/grading.md and docs/grading.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {"peers": Variant("benchmarks.grading.peers", "dots' grader vs the peer graders on the same pairs")}

SMOKE = [["peers", "--no-peers", "--lab-problems", "0", "--limit", "20", "--out", "{tmp}/graders.json"]]
