"""Bytes per parameter per source of the τ̃ cache: dense float32 (cache version 1) vs compact (2).

Cache version 1 stored τ⊙M as dense float32: 4 bytes per merged parameter per source,
whatever the density. Version 2 (`dots.vectors.compact`) stores where the mask keeps an
entry — a bitmask (1/8 byte per parameter) or sorted int32 positions (4 bytes per kept
entry), whichever is smaller per tensor — and θ_i's own values there in the checkpoint's
dtype: 1/8 + 0.3·2 = 0.725 bytes per parameter for bf16 at density 0.3 (target ≤ 0.75).
A `ResidentSynthesizer` (synth_cache=memory) holds the same compact tensors (the file
less its header), so the figures are also its τ̃ memory per source.

For each trio and density this builds the compact cache (timed) and reports, per source:
the file's bytes per merged parameter (header included) and its parts (values, bitmask
or positions, −0.0 positions), the forms chosen, and the figures scaled to
backbone=qwen7b (7.6 B parameters, two sources) at the measured rate. The dense figure is computed (4 × merged
parameters, what version 1 wrote, header aside), not rebuilt.

Trios: the lab trio shipped with dots (`dots.lab.ensure_trio()`), and a Qwen2.5-0.5B-shaped
bf16 trio from benchmarks/harness/generate.py (`--shape qwen2.5-0.5b --dtype bfloat16
--noise finetune`: sft changes ~9 in 10 entries, rlvr ~1 in 10), generated under --root.

    python -m benchmarks.scale cache-bytes --root /tmp/dots-cache-bytes [--densities 0.3 0.1 0.01 1.0] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness.results import command_line, cpu_machine, report
from benchmarks.harness.trio import generate

REPO = Path(__file__).resolve().parents[2]

QWEN7B_PARAMS = 7.6e9  # backbone=qwen7b (Qwen2.5-7B): 7.62 B parameters
GB = 1e9


def trios(root: Path, skip_generated: bool) -> dict[str, tuple[Path, dict[str, Path]]]:
    from dots.lab import ensure_trio

    lab = ensure_trio()
    out = {"lab (bf16, 0.5 M parameters)": (lab["base"], {"sft": lab["sft"], "rlvr": lab["rlvr"]})}
    if not skip_generated:
        gen = root / "qwen2.5-0.5b"
        if not (gen / "rlvr" / "config.json").exists():
            generate(gen, "--shape", "qwen2.5-0.5b", "--dtype", "bfloat16", "--noise", "finetune")
        out["Qwen2.5-0.5B shapes (bf16, 494 M parameters)"] = (gen / "base", {k: gen / k for k in ("sft", "rlvr")})
    return out


def measure(base_dir: Path, sources: dict[str, Path], density: float, cache: Path) -> tuple[float, list[dict]]:
    from dots.io.checkpoint import Checkpoint
    from dots.vectors import SparsifyConfig, build_task_vectors
    from dots.vectors.compact import NEGZERO, VALUES, WHERE

    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    tv = build_task_vectors(
        Checkpoint(base_dir), {k: Checkpoint(v) for k, v in sources.items()}, SparsifyConfig(density=density), cache
    )
    seconds = time.perf_counter() - start
    rows = []
    for key, entry in tv.entries.items():
        numel = entry.meta["numel"]
        parts = Counter()
        weights = entry.weights
        for name in tv.names:
            for suffix in (VALUES, WHERE, NEGZERO):
                if name + suffix in weights:
                    parts[suffix] += weights.info(name + suffix).nbytes
        rows.append(
            {
                "source": key,
                "numel": numel,
                "kept": entry.meta["kept"] / numel,
                "file": entry.nbytes,
                "values": parts[VALUES],
                "where": parts[WHERE],
                "negzero": parts[NEGZERO],
                "forms": Counter(v["form"] for v in entry.meta["tensors"].values()),
            }
        )
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/dots-cache-bytes"))
    parser.add_argument("--densities", type=float, nargs="+", default=[0.3])
    parser.add_argument("--lab-only", action="store_true", help="skip the generated 0.5B trio")
    parser.add_argument("--keep", action="store_true", help="keep the generated trio and caches")
    parser.add_argument("--record", action="store_true", help="append the table to benchmarks/results/scale.md")
    parser.add_argument("--machine", default=None)
    args = parser.parse_args()
    os.environ.setdefault("DOTS_PROGRESS", "0")

    lines = [
        "| trio | density | source | kept | dense v1 (B/param) | compact v2 (B/param) | values | where | "
        "−0.0 list | forms | build (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    per_param: dict[float, list[float]] = {}
    for label, (base, sources) in trios(args.root, args.lab_only).items():
        for density in args.densities:
            seconds, rows = measure(base, sources, density, args.root / "cache")
            for r in rows:
                n = r["numel"]
                if "0.5B" in label:
                    per_param.setdefault(density, []).append(r["file"] / n)
                forms = ", ".join(f"{f} {c}" for f, c in sorted(r["forms"].items()))
                lines.append(
                    f"| {label} | {density:g} | {r['source']} | {r['kept']:.3f} | 4.000 | **{r['file'] / n:.3f}** | "
                    f"{r['values'] / n:.3f} | {r['where'] / n:.3f} | {r['negzero'] / n:.4f} | {forms} | {seconds:.1f} |"
                )
            print(lines[-1], flush=True)
    scaled = [
        f"density {d:g}: dense {2 * 4 * QWEN7B_PARAMS / GB:.0f} GB → compact "
        f"{max(v) * 2 * QWEN7B_PARAMS / GB:.1f} GB (both sources at the densest one's rate, {max(v):.3f} B/param)"
        for d, v in per_param.items()
        if v
    ]
    date = datetime.date.today().isoformat()
    machine = args.machine or cpu_machine()
    out = [
        "",
        f"## τ̃ cache bytes per parameter per source, dense vs compact (benchmarks/scale/cache_bytes.py) — {date}",
        "",
        f"Command: `{command_line()}`. Machine: {machine}.",
        "B/param: bytes of the source's cache entry per merged parameter (compact: the whole safetensors file, "
        "header included; dense: 4 × parameters, what cache version 1 wrote). kept: share of entries with "
        "τ⊙M ≠ 0 (stored). build: the compact cache of both sources (sparsify + encode + write).",
        "",
        *lines,
        "",
    ]
    if scaled:
        out += [
            "Scaled to backbone=qwen7b (7.6 B parameters, two sources) from the 0.5B trio: " + "; ".join(scaled) + ".",
            "",
        ]
    report(out, args.record, "scale")
    if not args.keep:
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
