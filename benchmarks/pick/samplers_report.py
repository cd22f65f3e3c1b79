"""`report` of benchmarks/pick/samplers.py: per lab the ground truth of the sources, a λ grid, the
classic merges and every study's picks; hypervolume, trials and tokens to the 95% target; the
cross-lab table, results.md / results.json and one figure per lab."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks.harness.lab import out_root
from benchmarks.harness.results import write_json
from benchmarks.pick.samplers_study import SAMPLERS, config_name
from benchmarks.pick.truth import GRID, GroundTruth, classic_merges, fallbacks, first_reach, hv_curve, percent, spread


def cmd_report(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    root = out_root()
    summary: dict[str, Any] = {"test_size": args.test_size, "labs": {}}
    md: list[str] = []
    for lab in args.labs:
        ldir = root / f"lab{lab}"
        results = []
        for path in sorted(ldir.glob("*/seed*/result.json")):
            results.append({**json.loads(path.read_text()), "fallbacks": fallbacks(path)})
        if not results or not (ldir / "reference.json").exists():
            continue
        refs = json.loads((ldir / "reference.json").read_text())
        ref = (
            min(refs["sft"]["consistency"], refs["rlvr"]["consistency"]),
            max(refs["sft"]["perplexity"], refs["rlvr"]["perplexity"]),
        )
        gt = GroundTruth(lab, args.test_size)
        models = {s: gt.checkpoint(s, gt.paths[s]) for s in ("base", "sft", "rlvr")}
        grid = {(a, b): gt.merge({"sft": a, "rlvr": b}) for a in GRID for b in GRID}
        best_grid = max(grid, key=lambda k: grid[k]["all"])
        merges = {m: gt.checkpoint(m, p) for m, p in classic_merges(lab, gt.paths).items()}
        best_merge = max(merges, key=lambda m: merges[m]["all"])
        by_cfg: dict[str, list[dict]] = {}
        for r in results:
            r["hv"] = hv_curve(r, ref)
            r["cum_tokens"] = [sum(t["tokens"] for t in r["trials"][: i + 1]) for i in range(len(r["trials"]))]
            for p in r["picks"].values():
                p["gt"] = gt.merge(p["params"])
            if r["adaptive"]:  # the variant "adaptive, then the final front re-scored with all k"
                by_number = {t["number"]: t for t in r["trials"]}
                front = [by_number[n] for n in r["fronts"][-1]]
                best = min(front, key=lambda t: (-t["consistency_full"], t["perplexity"], t["number"]))
                r["rescored_pick"] = {
                    "trial": best["number"],
                    "params": best["params"],
                    "front_size": len(front),
                    "gt": gt.merge(best["params"]),
                }
            by_cfg.setdefault(config_name(r["sampler"], r["adaptive"]), []).append(r)
        ref_runs = [r for r in by_cfg.get("tpe-full", []) if len(r["hv"]) >= 50]
        target = 0.95 * statistics.mean(r["hv"][49] for r in ref_runs) if ref_runs else None
        rows = []
        lab_json: dict[str, Any] = {
            "reference_point": {"consistency": ref[0], "perplexity": ref[1]},
            "sources_objectives": refs,
            "target_hv": target,
            "models": models,
            "grid": {f"{a},{b}": v for (a, b), v in grid.items()},
            "best_grid": {"lambda": best_grid, **grid[best_grid]},
            "merges": merges,
            "configs": {},
        }
        for name in [config_name(s, a) for s in SAMPLERS for a in (False, True)]:
            runs = by_cfg.get(name, [])
            if not runs:
                continue
            n_trials = min(len(r["hv"]) for r in runs)
            reach = [first_reach(r["hv"], target) if target is not None else None for r in runs]
            reach_tokens = [r["cum_tokens"][t - 1] for r, t in zip(runs, reach) if t is not None]
            tok_per_trial = [statistics.mean(t["tokens"] for t in r["trials"]) for r in runs]
            samples_per_trial = [statistics.mean(t["samples"] for t in r["trials"]) for r in runs]
            final = str(n_trials)
            gt_final = [r["picks"][final]["gt"]["all"] for r in runs if final in r["picks"]]
            gt_25 = [r["picks"]["25"]["gt"]["all"] for r in runs if "25" in r["picks"]]
            sec = [statistics.median(t["seconds"] for t in r["trials"]) for r in runs]
            beats = sum(g > max(models["sft"]["all"], models["rlvr"]["all"]) for g in gt_final)
            cfg_json = {
                "seeds": [r["seed"] for r in runs],
                "n_trials": n_trials,
                "hv_at_25": [r["hv"][min(25, len(r["hv"])) - 1] for r in runs],
                "hv_final": [r["hv"][-1] for r in runs],
                "trials_to_target": reach,
                "tokens_to_target": reach_tokens,
                "tokens_per_trial": tok_per_trial,
                "samples_per_trial": samples_per_trial,
                "pick_gt_final": gt_final,
                "pick_gt_25": gt_25,
                "picks": [r["picks"] for r in runs],
                "median_trial_seconds": sec,
                "beats_both_sources": beats,
                "random_fallbacks": [r["fallbacks"] for r in runs],
                "runs": [
                    {
                        "seed": r["seed"],
                        "reach": t,
                        "reach_tokens": r["cum_tokens"][t - 1] if t is not None else None,
                        "tokens_per_trial": tpt,
                        "gt_final": r["picks"][final]["gt"]["all"],
                        "gt_25": r["picks"]["25"]["gt"]["all"] if "25" in r["picks"] else None,
                        "best_source": max(models["sft"]["all"], models["rlvr"]["all"]),
                    }
                    for r, t, tpt in zip(runs, reach, tok_per_trial)
                ],
            }
            lab_json["configs"][name] = cfg_json
            reached = [t for t in reach if t is not None]
            rows.append(
                f"| {name} | {len(runs)} | {n_trials} | {spread(cfg_json['hv_final'], '{:.4f}')} | "
                f"{len(reached)}/{len(runs)}: {spread(reached, '{:.0f}') if reached else '—'} | "
                f"{spread(reach_tokens, '{:,.0f}') if reach_tokens else '—'} | {spread(tok_per_trial, '{:,.0f}')} | "
                f"{spread(percent(gt_25))} | {spread(percent(gt_final))} | {beats}/{len(gt_final)} | "
                f"{spread([r['fallbacks'] for r in runs], '{:.0f}')} |"
            )
        summary["labs"][str(lab)] = lab_json
        merge_list = ", ".join(f"{m} {100 * v['all']:.1f}%" for m, v in merges.items())
        md += [
            f"### Lab seed={lab}",
            "",
            f"Reference point (worse source on each objective): C = {ref[0]:.4f}, PPL = {ref[1]:.3f}; "
            f"target = 95% of the mean 50-trial hypervolume of tpe-full = {target:.4f}"
            if target is not None
            else f"Reference point: C = {ref[0]:.4f}, PPL = {ref[1]:.3f}; no 50-trial tpe-full run yet",
            "",
            f"Ground truth (greedy, {len(gt.problems)} test problems, A∪B): base {100 * models['base']['all']:.1f}%, "
            f"SFT {100 * models['sft']['all']:.1f}%, RLVR {100 * models['rlvr']['all']:.1f}%; best grid λ = "
            f"{best_grid} {100 * grid[best_grid]['all']:.1f}%; best classic merge {best_merge} "
            f"{100 * merges[best_merge]['all']:.1f}% "
            f"({merge_list}).",
            "",
            "| config | seeds | trials | HV at end | reached 95% target: trials | tokens to target | "
            "tokens / trial | pick acc @25 | pick acc @end | pick > both sources | random fallbacks |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
        full_tokens = statistics.mean(
            t["tokens"] for r in by_cfg.get("tpe-full", []) for t in r["trials"]
        )  # a full-k trial's tokens on this lab
        resc = []
        for sampler in SAMPLERS:
            runs = by_cfg.get(config_name(sampler, True), [])
            if not runs:
                continue
            gts = [r["rescored_pick"]["gt"]["all"] for r in runs]
            own = [r["picks"][str(len(r["trials"]))]["gt"]["all"] for r in runs]
            spent = [r["cum_tokens"][-1] + r["rescored_pick"]["front_size"] * full_tokens for r in runs]
            full_runs = by_cfg.get(config_name(sampler, False), [])
            full_spent = statistics.median(r["cum_tokens"][-1] for r in full_runs) if full_runs else None
            lab_json["configs"][config_name(sampler, True)]["rescored"] = {
                "gt": gts,
                "tokens_with_rescore": spent,
                "front_sizes": [r["rescored_pick"]["front_size"] for r in runs],
            }
            best_source = max(models["sft"]["all"], models["rlvr"]["all"])
            ratio = f"{statistics.median(spent) / full_spent:.2f}" if full_spent else "—"
            resc.append(
                f"| {sampler}-adaptive | {spread(percent(own))} | {spread(percent(gts))} | "
                f"{sum(g > best_source for g in gts)}/{len(gts)} | "
                f"{spread([r['rescored_pick']['front_size'] for r in runs], '{:.0f}')} | "
                f"{spread(spent, '{:,.0f}')} | {ratio} |"
            )
        md += [
            "Adaptive studies with the final front re-scored with all k samples before the pick "
            "(max full-k consistency on the search's own final front); tokens include the re-score "
            f"(front size × {full_tokens:,.0f}, a full-k trial's mean here); ratio: against the same "
            "sampler's full study (median):",
            "",
            "| config | pick acc (own C) | pick acc (re-scored front) | > both sources | front size | "
            "tokens incl. re-score | / full study |",
            "|---|---|---|---|---|---|---|",
            *resc,
            "",
        ]
        plot_lab(lab, by_cfg, target, ref, root / f"hv_lab{lab}.png")
    md = cross_lab(summary) + md
    write_json(root / "results.json", summary)
    (root / "results.md").write_text("\n".join(md))
    print("\n".join(md))


def cross_lab(summary: dict) -> list[str]:
    """One row per config over every (lab, seed): trials and tokens to the 95% target, tokens per
    trial, and the pick's ground truth against the better source and against tpe-full's pick of
    the same lab and seed (paired)."""
    labs = summary["labs"]
    rows = []
    for name in [config_name(s, a) for s in SAMPLERS for a in (False, True)]:
        runs, paired_end, paired_25 = [], [], []
        for lab in labs.values():
            cfg = lab["configs"].get(name)
            if not cfg:
                continue
            ref = {r["seed"]: r for r in lab["configs"].get("tpe-full", {}).get("runs", [])}
            for r in cfg["runs"]:
                runs.append(r)
                if r["seed"] in ref:
                    paired_end.append(r["gt_final"] - ref[r["seed"]]["gt_final"])
                    if r["gt_25"] is not None and ref[r["seed"]]["gt_25"] is not None:
                        paired_25.append(r["gt_25"] - ref[r["seed"]]["gt_25"])
        if not runs:
            continue
        reached = [r["reach"] for r in runs if r["reach"] is not None]
        tokens = [r["reach_tokens"] for r in runs if r["reach_tokens"] is not None]
        gain = [r["gt_final"] - r["best_source"] for r in runs]
        rows.append(
            f"| {name} | {len(runs)} | {len(reached)}/{len(runs)}: {spread(reached, '{:.0f}') if reached else '—'} | "
            f"{spread(tokens, '{:,.0f}') if tokens else '—'} | "
            f"{spread([r['tokens_per_trial'] for r in runs], '{:,.0f}')} | "
            f"{spread(percent(gain), '{:+.1f}')} | {sum(g > 0 for g in gain)}/{len(gain)} | "
            f"{spread(percent(paired_25), '{:+.1f}') if paired_25 else '—'} | "
            f"{spread(percent(paired_end), '{:+.1f}') if paired_end else '—'} |"
        )
    return [
        "### All labs",
        "",
        "Medians [min–max] over every (lab, search seed) run. Target: 95% of the mean hypervolume of "
        "tpe-full after 50 trials on the same lab. Accuracy: greedy, A∪B, the pick of the search's "
        "own rule (max consistency on the front) after its last trial; 'vs tpe-full' pairs runs of "
        "the same lab and seed. Accuracy in %, its differences in points.",
        "",
        "| config | runs | reached target: trials | tokens to target | tokens / trial | "
        "pick acc − better source | pick > both sources | pick acc − tpe-full's @25 | pick acc − tpe-full's @end |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def plot_lab(lab: int, by_cfg: dict[str, list[dict]], target: float | None, ref: tuple, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colors = {"tpe": "tab:blue", "gp": "tab:orange", "nsga2": "tab:green", "random": "tab:gray"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120)
    for name, runs in sorted(by_cfg.items()):
        sampler, mode = name.split("-")
        n = min(len(r["hv"]) for r in runs)
        hv = np.array([r["hv"][:n] for r in runs])
        tok = np.array([r["cum_tokens"][:n] for r in runs]).mean(0)
        style = "-" if mode == "full" else "--"
        x = np.arange(1, n + 1)
        med = np.median(hv, 0)
        for ax, xs in ((axes[0], x), (axes[1], tok)):
            ax.plot(xs, med, style, color=colors[sampler], lw=1.6, label=f"{name} ({len(runs)} seeds)")
            ax.fill_between(xs, hv.min(0), hv.max(0), color=colors[sampler], alpha=0.08 if mode == "full" else 0.05)
    for ax in axes:
        if target is not None:
            ax.axhline(target, color="black", lw=0.8, ls=":", label="95% of tpe-full @50")
        ax.set_ylabel("hypervolume (C ↑, PPL ↓)")
        ax.grid(alpha=0.3)
    axes[0].set_xlabel("trials")
    axes[1].set_xlabel("tokens generated (mean over seeds)")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"lab seed={lab}: hypervolume of the running front (median, band = min–max over seeds); "
        f"ref C={ref[0]:.3f}, PPL={ref[1]:.2f}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
