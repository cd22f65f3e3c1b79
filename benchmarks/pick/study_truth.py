"""One lab's numbers for benchmarks/pick/study.py: the ground truth of the sources, the λ grid and
the classic merges, every run's picks under each rule, stopping replayed, and how C, PPL and
source agreement rank the grid (with its figure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.harness.lab import out_root
from benchmarks.pick.picks import (
    RULES,
    agreement_with,
    fixed_from,
    front_of,
    pick_by,
    source_rate,
    spearman,
    stop_at,
)
from benchmarks.pick.study_runs import root
from benchmarks.pick.truth import GRID, GroundTruth, classic_merges


def lab_report(lab: int, test_size: int) -> dict | None:
    """Ground truth, the picks of every rule, stopping replayed: one lab's numbers."""
    from dots.search.pick.diagnosis import source_answers

    ldir = root() / f"lab{lab}"
    runs = [json.loads(p.read_text()) for p in sorted(ldir.glob("*/seed*/result.json"))]
    if not runs:
        return None
    gt = GroundTruth(lab, test_size)
    models = {s: gt.checkpoint(s, gt.paths[s])["all"] for s in ("base", "sft", "rlvr")}
    grid = {(a, b): gt.merge({"sft": a, "rlvr": b})["all"] for a in GRID for b in GRID}
    merges = {m: gt.checkpoint(m, p)["all"] for m, p in classic_merges(lab, gt.paths).items()}
    record = next((out_root() / f"lab{lab}" / "selection").glob("difficulty-*.jsonl"))
    sources = source_answers(record)
    ids = runs[0]["ids"]
    pair = source_rate(ids, sources)
    best_source = max(models["sft"], models["rlvr"])
    out: dict[str, Any] = {
        "models": models,
        "grid": {f"{a},{b}": v for (a, b), v in grid.items()},
        "best_grid": max(grid.values()),
        "best_grid_lambda": max(grid, key=lambda k: grid[k]),
        "merges": merges,
        "best_merge": max(merges.values()),
        "source_agreement": pair,
        "runs": [],
    }
    for r in runs:
        trials = r["trials"]
        row: dict[str, Any] = {"config": r["config"], "seed": r["seed"], "trials": len(trials)}
        row["tokens"] = sum(t["tokens"] for t in trials)
        row["pruned"] = sum(not t["complete"] for t in trials)
        row["fallbacks"] = sum(t["fallback"] for t in trials)
        for rule in RULES:
            chosen = pick_by(trials, rule, ids, sources, pair)
            row[rule] = {
                "trial": chosen["number"],
                "params": chosen["params"],
                "gt": gt.merge(chosen["params"])["all"],
                "agreement": agreement_with(chosen["answers"], ids, sources),
            }
        n_stop = stop_at(trials)
        kept = trials[:n_stop]
        chosen = pick_by(kept, "max_consistency", ids, sources, pair)
        row["stop"] = {
            "trials": n_stop,
            "tokens": sum(t["tokens"] for t in kept),
            "trial": chosen["number"],
            "gt": gt.merge(chosen["params"])["all"],
        }
        n_fixed = fixed_from(trials, lambda ts: pick_by(ts, "max_consistency", ids, sources, pair))
        row["fixed"] = {"trials": n_fixed, "tokens": sum(t["tokens"] for t in trials[:n_fixed])}
        front = front_of(trials)
        row["front_low"] = sum(min(t["params"].values()) < 0.5 for t in front) / len(front)
        row["beats_both"] = row["max_consistency"]["gt"] > best_source
        out["runs"].append(row)
    grid_path = ldir / "grid" / "result.json"
    if grid_path.exists():
        g = json.loads(grid_path.read_text())
        pts = g["points"]
        acc = [grid[(p["params"]["sft"], p["params"]["rlvr"])] for p in pts]
        agree = [agreement_with(p["answers"], ids, sources) or 0.0 for p in pts]
        out["grid_signals"] = {
            "points": [{**p, "answers": None, "gt": a, "agreement": ag} for p, a, ag in zip(pts, acc, agree)],
            "reference": g["reference"],
            "spearman": {
                "consistency": spearman([p["consistency"] for p in pts], acc),
                "neg_perplexity": spearman([-p["perplexity"] for p in pts], acc),
                "agreement": spearman(agree, acc),
            },
        }
    return out


def plot_signals(reps: dict[int, dict], path: Path) -> None:
    """Per lab: ground truth, C, PPL and source agreement over the 5×5 λ grid, with the picks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labs = [lab for lab, rep in reps.items() if "grid_signals" in rep]
    if not labs:
        return
    n = len(GRID)
    fig, axes = plt.subplots(len(labs), 4, figsize=(13, 2.9 * len(labs)), dpi=110, squeeze=False)
    panels = (
        ("gt", "ground truth (greedy)", "viridis"),
        ("consistency", "consistency C", "viridis"),
        ("perplexity", "log perplexity", "viridis_r"),
        ("agreement", "agreement with the sources", "viridis"),
    )
    for row, lab in zip(axes, labs):
        rep = reps[lab]
        pts = rep["grid_signals"]["points"]
        for ax, (key, title, cmap) in zip(row, panels):
            m = np.zeros((n, n))
            for p in pts:
                i, j = GRID.index(p["params"]["rlvr"]), GRID.index(p["params"]["sft"])
                m[i, j] = np.log(p[key]) if key == "perplexity" else p[key]
            im = ax.imshow(m, origin="lower", cmap=cmap, extent=(-0.25, 2.25, -0.25, 2.25))
            fig.colorbar(im, ax=ax, fraction=0.046)
            for r in rep["runs"]:
                if r["config"] == "tpe":
                    for rule, marker in (("max_consistency", "x"), ("agreement", "o")):
                        lam = r[rule]["params"]
                        ax.plot(lam["sft"], lam["rlvr"], marker, color="red", mfc="none", ms=7)
            rho = rep["grid_signals"]["spearman"].get(
                {"consistency": "consistency", "perplexity": "neg_perplexity", "agreement": "agreement"}.get(key, ""),
                None,
            )
            ax.set_title(f"lab {lab}: {title}" + (f"  ρ={rho:+.2f}" if rho is not None else ""), fontsize=8)
            ax.set_xlabel("λ_sft", fontsize=8)
            ax.set_ylabel("λ_rlvr", fontsize=8)
    title = "5×5 λ grid (full scorer, seed 0); ρ: Spearman with the ground truth; red x: tpe's picks, o: agreement"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
