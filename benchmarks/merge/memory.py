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

import argparse
import os
import shutil
import sys
from pathlib import Path

from benchmarks.harness.results import append, rss_ratio, section
from benchmarks.harness.timing import per_size, require_time, time_command
from benchmarks.harness.trio import generate


def merge_command(root: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dots.merge",
        "method=ties",
        f"backbone.base={root / 'base'}",
        f"+backbone.sources.sft={root / 'sft'}",
        f"+backbone.sources.rlvr={root / 'rlvr'}",
        f"output={out}",
        "overwrite=true",
    ]


def measure(root: Path, runs: int) -> list[tuple[float, float]]:
    env = {**os.environ, "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(root / "outputs")}
    results = []
    for i in range(runs):
        out = root / "merged"
        wall, rss = time_command(merge_command(root, out), env, root, "merge")
        print(f"  run {i + 1}: wall {wall:.1f} s, peak RSS {rss:.2f} GiB", flush=True)
        results.append((wall, rss))
        shutil.rmtree(out, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1.0, 4.0], help="checkpoint sizes in GB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-bench"))
    parser.add_argument("--record", action="store_true", help="append the medians to benchmarks/results/merge.md")
    parser.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    parser.add_argument("--machine", default="2 CPU cores, 24 GiB RAM (shared)")
    parser.add_argument("--date", default=None)
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
    print("\n".join(lines))
    ratio = rss_ratio(args.sizes, [row[3] for row in rows])
    if args.record:
        sizes = " ".join(f"{s:g}" for s in args.sizes)
        body = [
            f"Command: `python -m benchmarks.merge memory --sizes {sizes} --runs {args.runs} --record` "
            "(each run: `/usr/bin/time -v python -m dots.merge method=ties backbone.base=BASE "
            "+backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT overwrite=true`).",
            f"Machine: {args.machine}. Checkpoints: benchmarks/harness/generate.py, Qwen2-0.5B-shaped float32, "
            "size set by depth (largest tensor = the 151936×896 embedding, 545 MB, at every size). "
            f"Medians of {args.runs} runs.",
            "",
            *lines,
            "",
            f"Peak RSS ratio {args.sizes[-1]:g} GB / {args.sizes[0]:g} GB: **{ratio:.3f}** (target ≤ 1.3). "
            "Bound (K+4)×largest fp32 tensor = 6 × 0.51 GiB = 3.04 GiB + interpreter/torch overhead.",
        ]
        append("\n".join(section("Streaming merge memory (ties, K=2)", args.date, body)), "merge")


if __name__ == "__main__":
    main()
