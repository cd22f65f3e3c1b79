"""Peak memory and wall time of a streaming `ties` merge at two model sizes.

Generates (benchmarks/harness/generate.py) a Qwen2-shaped float32 base + 2 sources of
each size, runs `python -m dots.merge method=ties ...` under `/usr/bin/time -v` (Debian
package `time`) `--runs` times per size, prints the medians and, with `--record`,
appends them to benchmarks/results/merge.md. The target: the peak RSS at 4 GB within 1.3× of
the one at 1 GB (both have the same largest tensor, so a streaming merge should not
grow with depth). Generated checkpoints and outputs are deleted at the end.

    python -m benchmarks.merge memory --sizes 1 4 --runs 5 --root /tmp/dots-bench --record
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.harness.results import size_table
from benchmarks.harness.timing import per_size, require_time, sizes_parser, timed_runs
from benchmarks.harness.trio import generate, trio_command


def measure(root: Path, runs: int) -> list[tuple[float, float]]:
    env = {**os.environ, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(root / "outputs")}
    out = root / "merged"
    return timed_runs(trio_command("merge", root, out), out, runs, env, root, "merge")


def main() -> None:
    parser = sizes_parser(__doc__ or "", [1.0, 4.0], 5, "/tmp/dots-bench", "2 CPU cores, 24 GiB RAM (shared)", "merge")
    parser.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    args = parser.parse_args()
    require_time()

    def run_size(size: float, root: Path) -> tuple[None, list[tuple[float, float]]]:
        print(f"generating {size:g} GB checkpoints under {root}", flush=True)
        generate(root, "--size-gb", str(size))
        return None, measure(root, args.runs)

    rows = per_size(args.sizes, args.root, run_size, args.keep)
    lines = [
        "| checkpoint size (each of base + 2 sources, fp32) | median wall (s) | median peak RSS (GiB) | RSS min–max |",
        "|---|---|---|---|",
    ]
    for size, _, wall, rss, lo, hi in rows:
        lines.append(f"| {size:g} GB | {wall:.1f} | {rss:.2f} | {lo:.2f}–{hi:.2f} |")
    notes = [
        "Each run: `/usr/bin/time -v python -m dots.merge method=ties backbone.base=BASE +backbone.sources.sft=SFT "
        "+backbone.sources.rlvr=RLVR output=OUT overwrite=true`.",
        f"Machine: {args.machine}. Checkpoints: benchmarks/harness/generate.py, Qwen2-0.5B-shaped float32, "
        "size set by depth (largest tensor = the 151936×896 embedding, 545 MB, at every size). "
        f"Medians of {args.runs} runs. Bound (K+4)×largest fp32 tensor = 6 × 0.51 GiB = 3.04 GiB + "
        "interpreter/torch overhead.",
    ]
    size_table(args, lines, [row[3] for row in rows], "Streaming merge memory (ties, K=2)", notes, "merge")


if __name__ == "__main__":
    main()
