"""Peak RSS and wall time of `dots.merge` and `dots.analyze` vs model size, as a plot.

For each size, generates (gen_checkpoints.py `--shape qwen2.5-SIZE --dtype bfloat16
--noise finetune`) a base + SFT-like + RLVR-like trio with the real Qwen2.5 widths and
depths, then runs under `/usr/bin/time -v` (Debian package `time`), `--runs` times each:

    python -m dots.merge method=ties backbone.base=BASE +backbone.sources.sft=SFT \
        +backbone.sources.rlvr=RLVR output=OUT overwrite=true
    python -m dots.analyze ~backbone +backbone.name=bench +backbone.base=BASE \
        +backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT force=true

Writes docs/figures/scaling.png (wall time and peak RSS against parameters, one line per
command) and, with `--record`, appends the medians to benchmarks/results/scale.md. The
generated checkpoints of a size are deleted before the next size is generated.

    python -m benchmarks.scale sizes --sizes 0.5b 1.5b 3b --runs 5 --root /tmp/dots-scaling --record
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
from pathlib import Path

from benchmarks.harness.results import REPO, command_line, report
from benchmarks.harness.timing import time_command
from benchmarks.harness.trio import generate, trio_command

FIGURE = REPO / "docs" / "figures" / "scaling.png"


def commands(root: Path, out: Path) -> dict[str, list[str]]:
    return {
        "merge (ties)": trio_command("merge", root, out / "merged", f"hydra.run.dir={out / 'hydra'}"),
        "analyze": trio_command("analyze", root, out / "analysis", f"hydra.run.dir={out / 'hydra'}"),
    }


def parameters(root: Path) -> tuple[int, int]:
    """(parameters, entries of the largest tensor) of the base."""
    from dots.io.checkpoint import Checkpoint

    ckpt = Checkpoint(root / "base")
    sizes = [ckpt.info(n).numel for n in ckpt.names]
    return sum(sizes), max(sizes)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_rss) = plt.subplots(1, 2, figsize=(10, 5.4))
    sizes = sorted(results, key=lambda s: results[s]["params"])
    x = [results[s]["params"] / 1e9 for s in sizes]
    for name in results[sizes[0]]["runs"]:
        style = "o--" if "before" in name else "o-"
        ax_time.plot(x, [statistics.median(r[0] for r in results[s]["runs"][name]) for s in sizes], style, label=name)
        ax_rss.plot(x, [statistics.median(r[1] for r in results[s]["runs"][name]) for s in sizes], style, label=name)
    ax_rss.plot(x, [results[s]["checkpoint_gib"] for s in sizes], "k:", label="one checkpoint (bf16)")
    ax_rss.plot(
        x,
        [6 * 4 * results[s]["largest"] / 2**30 for s in sizes],
        "k--",
        label="(K+4) × largest tensor in fp32 (a whole-tensor merge's working set)",
    )
    ax_time.set(xlabel="parameters (billions)", ylabel="wall time (s)", title="wall time")
    ax_rss.set(xlabel="parameters (billions)", ylabel="peak RSS (GiB)", title="peak RSS", ylim=(0, None))
    for ax in (ax_time, ax_rss):  # legends under the plots: over them they hide the lines
        ax.grid(alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8)
    fig.suptitle("dots on generated Qwen2.5-shaped bf16 trios (base + 2 sources), medians")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["0.5b", "1.5b", "3b"], choices=["0.5b", "1.5b", "3b"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-scaling"))
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench" / "scaling.json")
    parser.add_argument("--layers", type=int, default=None, help="override the depth (smoke tests)")
    parser.add_argument("--vocab", type=int, default=None, help="override the vocabulary (smoke tests)")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from --out, run nothing")
    parser.add_argument("--machine", default=f"{os.cpu_count()} CPU cores")
    parser.add_argument(
        "--commands",
        nargs="+",
        choices=["merge", "analyze"],
        default=["merge", "analyze"],
        help="measure only these; the others' earlier results in --out are kept",
    )
    args = parser.parse_args()

    env = {**os.environ, "DOTS_PROGRESS": "0", "PYTHONPATH": str(REPO)}
    results: dict = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.plot_only:
        plot(results, FIGURE)
        return
    for size in args.sizes:
        root = args.root / size
        smoke = [
            *(["--layers", str(args.layers)] if args.layers else []),
            *(["--vocab", str(args.vocab)] if args.vocab else []),
        ]
        generate(root, "--shape", f"qwen2.5-{size}", "--dtype", "bfloat16", "--noise", "finetune", *smoke)
        params, largest = parameters(root)
        today = datetime.date.today().isoformat()
        earlier = results.get(size, {})
        measured = {n for n in commands(root, args.root / "out") if n.split()[0] in args.commands}
        keep = {n: r for n, r in earlier.get("runs", {}).items() if n not in measured}
        entry = {
            "params": params,
            "largest": largest,
            "runs": keep,
            "dates": {n: earlier.get("dates", {}).get(n, "earlier") for n in keep},
            "checkpoint_gib": sum(p.stat().st_size for p in (root / "base").glob("*.safetensors")) / 2**30,
        }
        for run in range(args.runs):
            for name, cmd in commands(root, args.root / "out").items():
                if name not in measured:
                    continue
                entry["dates"][name] = today
                if run == 0:
                    entry["runs"][name] = []
                wall, rss = time_command(cmd, env, REPO, name)
                entry["runs"].setdefault(name, []).append([wall, rss])
                print(f"{size} {name} run {run + 1}: {wall:.1f} s, {rss:.2f} GiB", flush=True)
        results[size] = entry
        shutil.rmtree(args.root, ignore_errors=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    plot(results, FIGURE)

    date = datetime.date.today().isoformat()
    lines = [
        "",
        f"## Scaling of merge and analyze with model size (benchmarks/scale/sizes.py) — {date}",
        "",
        f"Command: `{command_line()}`. Machine: {args.machine}. Trios: gen_checkpoints.py "
        "`--shape qwen2.5-SIZE --dtype bfloat16 --noise finetune`. Medians of the runs (`--runs` per "
        "invocation; sizes measured by separate invocations are merged from the JSON); figure: "
        "docs/figures/scaling.png.",
        "",
        "| size | parameters | checkpoint (GiB) | largest tensor (fp32 GiB) | command | runs | wall (s) | "
        "peak RSS (GiB) | RSS min–max | measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sorted(results, key=lambda s: results[s]["params"]):
        entry = results[size]
        for name, runs in entry["runs"].items():
            rss = [r[1] for r in runs]
            lines.append(
                f"| {size} | {entry['params'] / 1e9:.2f} B | {entry['checkpoint_gib']:.2f} | "
                f"{4 * entry['largest'] / 2**30:.2f} | {name} | {len(runs)} | "
                f"{statistics.median(r[0] for r in runs):.1f} | {statistics.median(rss):.2f} | "
                f"{min(rss):.2f}–{max(rss):.2f} | {entry.get('dates', {}).get(name, 'earlier')} |"
            )
    report(lines, args.record, "scale")


if __name__ == "__main__":
    main()
