"""Task-vector facts and a 5x5 merge grid on the lab trio, scored against ground truth.

    python -m benchmarks.pick grid [lab overrides ...] [--samples 8] [--per-skill 1024] [--out F.json]

Prints markdown tables (the ones in docs/lab.md):
1. base / SFT / RLVR accuracy on A (add) and B (sub), greedy and T=0.6 (avg@k);
2. ‖τ_SFT‖ / ‖τ_RLVR‖, the share of entries changed in the stored dtype, sign conflict
   before and after top-30% per-tensor sparsification (docs/method.md §1, §6);
3. accuracy (greedy, T=0.6) and mean consistency (docs/method.md §3) over
   θ(λ) = θ0 + λ_SFT·τ̃_SFT + λ_RLVR·τ̃_RLVR, λ ∈ {0, 0.5, 1, 1.5, 2}², dense and sparsified
   (top-30% per tensor, one global norm-preserving γ per task vector), computed in float32
   and cast to the checkpoints' dtype, as a written merge would be.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dots.io.checkpoint import Checkpoint
from dots.lab import ensure_trio
from dots.lab import tasks as T
from dots.lab.build import torch_threads
from dots.lab.config import load_config
from dots.lab.sampling import LocalEngine
from dots.lab.score import accuracy

LAMBDAS = (0.0, 0.5, 1.0, 1.5, 2.0)


def load_fp32(path: Path) -> dict[str, torch.Tensor]:
    ckpt = Checkpoint(path)
    return {n: t.float() for n, t in ckpt.tensors() if t.is_floating_point()}


def sparsify(tau: dict[str, torch.Tensor], density: float) -> dict[str, torch.Tensor]:
    """Top-`density` entries per tensor by |τ| (ties by index), then one global γ = ‖τ‖/‖τ⊙M‖."""
    out, kept_sq, full_sq = {}, 0.0, 0.0
    for name, t in tau.items():
        flat = t.flatten()
        k = round(density * flat.numel())
        order = torch.sort(flat.abs(), descending=True, stable=True).indices[:k]
        mask = torch.zeros_like(flat, dtype=torch.bool)
        mask[order] = True
        out[name] = (flat * mask).view_as(t)
        kept_sq += float(out[name].double().pow(2).sum())
        full_sq += float(t.double().pow(2).sum())
    gamma = full_sq**0.5 / (kept_sq**0.5 + 1e-8)
    return {n: t * gamma for n, t in out.items()}


def vector_facts(tau_sft: dict, tau_rl: dict, density: float) -> dict:
    cat = lambda d: torch.cat([t.flatten() for t in d.values()])  # noqa: E731
    s, r = cat(tau_sft), cat(tau_rl)
    ss, sr = cat(sparsify(tau_sft, density)), cat(sparsify(tau_rl, density))

    def conflict(a, b):
        both = (a != 0) & (b != 0)
        return float(((a * b) < 0)[both].float().mean()) if both.any() else float("nan"), float(both.float().mean())

    dense_conf, dense_both = conflict(s, r)
    sparse_conf, sparse_both = conflict(ss, sr)
    return {
        "entries": s.numel(),
        "norm_sft": float(s.norm()),
        "norm_rlvr": float(r.norm()),
        "norm_ratio": float(s.norm() / r.norm()),
        "changed_sft": float((s != 0).float().mean()),
        "changed_rlvr": float((r != 0).float().mean()),
        "changed_sft_eps": float((s.abs() > 1e-5).float().mean()),
        "changed_rlvr_eps": float((r.abs() > 1e-5).float().mean()),
        "conflict_dense": dense_conf,
        "overlap_dense": dense_both,
        "conflict_sparse": sparse_conf,
        "overlap_sparse": sparse_both,
        "cosine": float(torch.nn.functional.cosine_similarity(s, r, dim=0)),
    }


def score(engine, problems, samples: int, max_tokens: int, seed: int) -> dict:
    g = accuracy(engine, problems, n=1, temperature=0.0, max_tokens=max_tokens)
    s = accuracy(engine, problems, n=samples, temperature=0.6, max_tokens=max_tokens, seed=seed)
    return {
        "greedy": {k: g[k] for k in ("all", *T.SKILLS)},
        "t06": {k: s[k] for k in ("all", *T.SKILLS)},
        "consistency": s["consistency"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--per-skill", type=int, default=1024, help="test problems per skill for the model table")
    ap.add_argument("--grid-per-skill", type=int, default=512, help="test problems per skill for the grid")
    ap.add_argument("--density", type=float, default=0.3)
    ap.add_argument("--no-grid", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for scoring (default: the lab's)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    cfg = load_config(args.overrides)
    paths = ensure_trio(args.overrides)
    dtype = Checkpoint(paths["base"]).info(Checkpoint(paths["base"]).names[0]).dtype
    problems = T.records(cfg.tasks, "test", size=args.per_skill * len(T.SKILLS))
    mt, seed = int(cfg.eval.max_tokens), int(cfg.seed)
    grid_problems = problems[: args.grid_per_skill * len(T.SKILLS)]  # records interleave skills
    result: dict = {
        "overrides": args.overrides,
        "problems": len(problems),
        "grid_problems": len(grid_problems),
        "samples": args.samples,
    }
    with torch_threads(args.threads or cfg.threads):
        theta0, sft, rl = (load_fp32(paths[k]) for k in ("base", "sft", "rlvr"))
        tau = {"sft": {n: sft[n] - theta0[n] for n in theta0}, "rlvr": {n: rl[n] - theta0[n] for n in theta0}}
        result["facts"] = vector_facts(tau["sft"], tau["rlvr"], args.density)
        engine = LocalEngine(paths["base"])
        result["models"] = {}
        for k in ("base", "sft", "rlvr"):
            engine.swap_checkpoint(paths[k])
            result["models"][k] = score(engine, problems, args.samples, mt, seed)
        if not args.no_grid:
            variants = {"dense": tau, "sparse": {k: sparsify(v, args.density) for k, v in tau.items()}}
            result["grid"] = {}
            start = time.perf_counter()
            for vname, tv in variants.items():
                for ls in LAMBDAS:
                    for lr in LAMBDAS:
                        merged = ((n, (theta0[n] + ls * tv["sft"][n] + lr * tv["rlvr"][n]).to(dtype)) for n in theta0)
                        engine.swap_weights(merged)
                        result["grid"][f"{vname},{ls},{lr}"] = score(engine, grid_problems, args.samples, mt, seed)
                print(f"{vname} grid done ({time.perf_counter() - start:.0f} s)", flush=True)
    print(markdown(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


def markdown(res: dict) -> str:
    f = res["facts"]
    lines = [
        f"Test set: {res['problems']} problems (half A, half B); accuracy in %, T=0.6 columns are "
        f"avg@{res['samples']}; consistency a share of 1.",
        "",
        "| model | A greedy | B greedy | A∪B greedy | A T=0.6 | B T=0.6 | A∪B T=0.6 | consistency |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, m in res["models"].items():
        g, s = m["greedy"], m["t06"]
        lines.append(
            f"| {k} | {100 * g['add']:.1f} | {100 * g['sub']:.1f} | {100 * g['all']:.1f} | {100 * s['add']:.1f} "
            f"| {100 * s['sub']:.1f} | {100 * s['all']:.1f} | {m['consistency']:.3f} |"
        )
    lines += [
        "",
        "| task-vector fact | value |",
        "|---|---|",
        f"| ‖τ_SFT‖ / ‖τ_RLVR‖ | {f['norm_ratio']:.2f} ({f['norm_sft']:.3f} / {f['norm_rlvr']:.4f}) |",
        f"| entries changed, SFT (stored dtype) | {f['changed_sft']:.1%} |",
        f"| entries changed, RLVR (stored dtype) | {f['changed_rlvr']:.1%} |",
        f"| sign conflict where both changed, dense | {f['conflict_dense']:.1%} "
        f"(on {f['overlap_dense']:.1%} of entries) |",
        f"| sign conflict where both kept, top-30% | {f['conflict_sparse']:.1%} "
        f"(on {f['overlap_sparse']:.1%} of entries) |",
        f"| cosine(τ_SFT, τ_RLVR) | {f['cosine']:.3f} |",
    ]
    if "grid" in res:
        lines += [
            "",
            f"Grid: {res['grid_problems']} test problems (half A, half B), T=0.6 columns avg@{res['samples']}; "
            "accuracy in %, A and B to the whole percent.",
        ]
        for vname in ("dense", "sparse"):
            for metric, label in (
                ("greedy", "A∪B greedy accuracy (A/B)"),
                ("t06", "A∪B T=0.6 accuracy (A/B)"),
                ("consistency", "mean consistency (T=0.6)"),
            ):
                lines += [
                    "",
                    f"{label}, {vname} task vectors (rows λ_SFT, columns λ_RLVR):",
                    "",
                    "| λ_SFT \\ λ_RLVR | " + " | ".join(f"{x:g}" for x in LAMBDAS) + " |",
                    "|---" * (len(LAMBDAS) + 1) + "|",
                ]
                for ls in LAMBDAS:
                    cells = []
                    for lr in LAMBDAS:
                        c = res["grid"][f"{vname},{ls},{lr}"]
                        if metric == "consistency":
                            cells.append(f"{c['consistency']:.3f}")
                        else:
                            m = c[metric]
                            cells.append(f"{100 * m['all']:.1f} ({100 * m['add']:.0f}/{100 * m['sub']:.0f})")
                    lines.append(f"| {ls:g} | " + " | ".join(cells) + " |")
        for vname in ("dense", "sparse"):
            grid = {k: v for k, v in res["grid"].items() if k.startswith(vname)}
            best = max(grid, key=lambda k: grid[k]["greedy"]["all"])
            pick = max(grid, key=lambda k: (grid[k]["consistency"], grid[k]["greedy"]["all"]))
            fmt = lambda k, grid=grid: (
                f"λ=({k.split(',')[1]}, {k.split(',')[2]}) greedy {100 * grid[k]['greedy']['all']:.1f}%"
            )  # noqa: E731
            lines += [
                "",
                f"{vname}: best merge {fmt(best)}; max-consistency merge {fmt(pick)} "
                f"(consistency {grid[pick]['consistency']:.3f}).",
            ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
