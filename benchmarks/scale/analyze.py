"""Peak RSS and wall time of `python -m dots.analyze` on generated trios of two sizes.

Generates a Qwen2-shaped float32 base + SFT-like (dense noise) + RLVR-like (5% sparse,
10× smaller noise) source of each size, streaming: each tensor is drawn from a generator
seeded by its name and written at its planned offset by CheckpointWriter; no model is
materialised. Unlike a depth-only scaling, the larger trio is also wider (Qwen2-1.5B
widths: a 151936×1536 embedding, 0.93 GB in fp32, vs 0.54 GB), so a flat RSS shows that
the analysis streams row chunks and does not hold whole tensors. Runs the CLI under
`/usr/bin/time -v` (Debian package `time`), prints wall time and peak RSS, with
`--record` appends them to benchmarks/results/scale.md, and deletes everything it generated.

    python -m benchmarks.scale analyze --sizes 2 8 --runs 1 --root /tmp/dots-analyze-bench --record
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.harness.checkpoints import BLOCK, Noise, Shape, add_noise, base_tensor, model_shapes, write_checkpoint
from benchmarks.harness.results import size_table
from benchmarks.harness.timing import per_size, require_time, sizes_parser, timed_runs
from benchmarks.harness.trio import trio_command
from dots.io.safetensors import TensorInfo

REPO = Path(__file__).resolve().parents[2]

VOCAB = 151936
FAMILIES = {  # hidden, heads, kv heads, MLP width (Qwen2-0.5B and Qwen2-1.5B)
    "0.5b": (896, 14, 2, 4864),
    "1.5b": (1536, 12, 2, 8960),
}
SOURCES = {"sft": Noise(1, 1e-3, 1.0, block=BLOCK), "rlvr": Noise(2, 1e-4, 0.05, block=BLOCK)}


def shapes_for(size_gb: float) -> tuple[str, dict[str, tuple[int, ...]]]:
    """The family (by size) and the tensor shapes, untied LM head, depth set by `size_gb`."""
    family = "0.5b" if size_gb < 4 else "1.5b"
    hidden, heads, kv_heads, mlp = FAMILIES[family]
    shape = replace(Shape(hidden, heads, kv_heads, mlp, None), tied=False)
    fixed = 2 * VOCAB * hidden * 4 + hidden * 4
    per_layer = sum(torch.Size(s).numel() for n, s in model_shapes(1, shape).items() if ".layers." in n) * 4
    layers = max(1, round((size_gb * 1e9 - fixed) / per_layer))
    return family, model_shapes(layers, shape)


def generate(root: Path, size_gb: float) -> dict:
    """base/, sft/ (dense noise) and rlvr/ (5% sparse, 10× smaller noise) under `root`."""
    family, shapes = shapes_for(size_gb)
    hidden = FAMILIES[family][0]
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": hidden,
        "num_hidden_layers": sum(1 for n in shapes if n.endswith("input_layernorm.weight")),
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    for role in ("base", *SOURCES):
        noise = SOURCES.get(role)

        def tensor(name: str, dims: tuple[int, ...], noise: Noise | None = noise) -> torch.Tensor:
            base = base_tensor(name, dims)
            return base if noise is None else add_noise(base, name, noise)

        files = {"config.json": json.dumps(config)}
        write_checkpoint(root / role, shapes, torch.float32, tensor, files, max_shard_bytes=4 * 2**30)
    total = sum(TensorInfo(s, torch.float32).nbytes for s in shapes.values())
    return {"family": family, "layers": config["num_hidden_layers"], "bytes": total, "hidden": hidden}


def measure(root: Path, runs: int) -> list[tuple[float, float]]:
    env = {**os.environ, "DOTS_PROGRESS": "0", "PYTHONPATH": str(REPO), "DOTS_OUTPUTS": str(root / "outputs")}
    out = root / "analysis"

    def summary(out: Path) -> None:
        print(f"  summary: {json.dumps(json.loads((out / 'analysis.json').read_text())['summary'])}", flush=True)

    return timed_runs(trio_command("analyze", root, out), out, runs, env, REPO, "analyze", summary)


def main() -> None:
    machine = "2 CPU cores, 24 GiB RAM (shared with other jobs)"
    parser = sizes_parser(__doc__ or "", [2.0, 8.0], 1, "/tmp/dots-analyze-bench", machine, "scale")
    args = parser.parse_args()
    require_time()

    def run_size(size: float, root: Path) -> tuple[dict, list[tuple[float, float]]]:
        shutil.rmtree(root, ignore_errors=True)
        print(f"generating a {size:g} GB trio under {root}", flush=True)
        info = generate(root, size)
        print(f"  {info}", flush=True)
        return info, measure(root, args.runs)

    rows = per_size(args.sizes, args.root, run_size)
    lines = [
        "| trio (each of base, sft, rlvr; fp32) | shapes | wall (s) | peak RSS (GiB) | RSS min–max |",
        "|---|---|---|---|---|",
    ]
    for _size, info, wall, rss, lo, hi in rows:
        lines.append(
            f"| {info['bytes'] / 1e9:.2f} GB | Qwen2-{info['family']} widths, {info['layers']} layers, "
            f"untied 151936×{info['hidden']} embedding + LM head | {wall:.1f} | {rss:.3f} | {lo:.3f}–{hi:.3f} |"
        )
    notes = [
        "Each run: `/usr/bin/time -v python -m dots.analyze ~backbone +backbone.name=bench +backbone.base=BASE "
        "+backbone.sources.sft=SFT +backbone.sources.rlvr=RLVR output=OUT force=true`, default "
        "chunk_entries=4194304, figures on.",
        f"Machine: {args.machine}. Median of {args.runs} run(s) per size; wall times are disk- and "
        "load-dependent (three passes read the trio three times).",
    ]
    title = "Streaming task-vector analysis memory (`python -m dots.analyze`, K=2)"
    size_table(args, lines, [row[3] for row in rows], title, notes, "scale")


if __name__ == "__main__":
    main()
