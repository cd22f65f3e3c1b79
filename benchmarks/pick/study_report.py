"""`report` of benchmarks/pick/study.py: the tables (signals per lab, where the fronts lie, the cost
levers, the GPU-hour projection, pruning against its control, the remedies, per-lab paired
differences), results.md / results.json and the signals figure."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Sequence

from benchmarks.harness.results import write_json
from benchmarks.harness.timing import median_or
from benchmarks.pick.picks import RULES, best_source, fmt_ci, front_of, paired, pick_by
from benchmarks.pick.study_runs import CONFIGS, root
from benchmarks.pick.study_truth import lab_report, plot_signals


def signal_rows(reps: dict[int, dict]) -> list[str]:
    md = [
        "| lab | base | SFT | RLVR | best grid (λ) | best classic | C base / SFT / RLVR | PPL base / SFT / RLVR "
        "| sources agree | ρ(C) | ρ(−PPL) | ρ(agreement) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lab, rep in reps.items():
        m, gs = rep["models"], rep.get("grid_signals", {})
        ref, sp = gs.get("reference", {}), gs.get("spearman", {})
        cs = " / ".join(f"{ref[s]['consistency']:.3f}" for s in ("base", "sft", "rlvr")) if ref else "—"
        ps = " / ".join(f"{ref[s]['perplexity']:.2f}" for s in ("base", "sft", "rlvr")) if ref else "—"
        top = max(rep["merges"], key=lambda k: rep["merges"][k])
        rho = " | ".join(f"{sp[k]:+.2f}" if k in sp else "—" for k in ("consistency", "neg_perplexity", "agreement"))
        md.append(
            f"| {lab} | {100 * m['base']:.1f} | {100 * m['sft']:.1f} | {100 * m['rlvr']:.1f} | "
            f"{100 * rep['best_grid']:.1f} {tuple(rep['best_grid_lambda'])} | {100 * rep['merges'][top]:.1f} {top} | "
            f"{cs} | {ps} | "
            f"{rep['source_agreement']:.3f} | {rho} |"
        )
    return md


def front_rows(reps: dict[int, dict]) -> list[str]:
    """Where tpe's fronts (λ ∈ [0, 2]) lie: the share of front points and of picks with some λ < 0.5,
    and the ground truth of the picks below 0.5 and of those above."""
    md = [
        "| lab | front points with a λ < 0.5 | picks with a λ < 0.5 | their accuracy (median) | the others' |",
        "|---|---|---|---|---|",
    ]
    for lab, rep in reps.items():
        runs = [r for r in rep["runs"] if r["config"] == "tpe"]
        low = [r for r in runs if min(r["max_consistency"]["params"].values()) < 0.5]
        high = [r for r in runs if r not in low]
        share = statistics.mean(r["front_low"] for r in runs) if runs else 0.0
        md.append(
            f"| {lab} | {share:.0%} | {len(low)}/{len(runs)} | {median_or([r['max_consistency']['gt'] for r in low])} "
            f"| {median_or([r['max_consistency']['gt'] for r in high])} |"
        )
    return md


def cost_rows(reps: dict[int, dict]) -> list[str]:
    md = [
        "| config | runs | tokens / study | pick fixed after: trials | tokens | beats both sources | paired vs tpe "
        "| search.stop: trials | tokens | beats both | paired vs tpe | paired vs its own full budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = ("tpe", "max_consistency")
    for cfg in CONFIGS:
        rows = [(rep, r) for rep in reps.values() for r in rep["runs"] if r["config"] == cfg]
        if not rows:
            continue
        n = len(rows)
        wins = sum(r["max_consistency"]["gt"] > best_source(rep) for rep, r in rows)
        stop_wins = sum(r["stop"]["gt"] > best_source(rep) for rep, r in rows)
        md.append(
            f"| {cfg} | {n} | {median_or([r['tokens'] for _, r in rows], '{:,.0f}')} "
            f"| {median_or([r['fixed']['trials'] for _, r in rows], '{:.0f}')} "
            f"| {median_or([r['fixed']['tokens'] for _, r in rows], '{:,.0f}')} | {wins}/{n} "
            f"| {fmt_ci(paired(reps, base, (cfg, 'max_consistency')))} "
            f"| {median_or([r['stop']['trials'] for _, r in rows], '{:.0f}')} "
            f"| {median_or([r['stop']['tokens'] for _, r in rows], '{:,.0f}')} | {stop_wins}/{n} "
            f"| {fmt_ci(paired(reps, base, (cfg, 'stop')))} "
            f"| {fmt_ci(paired(reps, (cfg, 'max_consistency'), (cfg, 'stop')))} |"
        )
    return md


def prune_rows(reps: dict[int, dict]) -> list[str]:
    """tpe-prune against tpe-b16 (the same blocks, prune off): points, front, pick and tokens."""
    md = [
        "| lab | seed | off's complete points also in on | same front | same pick | tokens off | tokens on | saved "
        "| pruned trials (queries scored) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def key(t: dict) -> str:
        return json.dumps([t["params"], t["consistency"], t["perplexity"]], sort_keys=True)

    for lab in reps:
        for off in sorted((root() / f"lab{lab}" / "tpe-b16").glob("seed*/result.json")):
            on = root() / f"lab{lab}" / "tpe-prune" / off.parent.name / "result.json"
            if not on.exists():
                continue
            a, b = json.loads(off.read_text())["trials"], json.loads(on.read_text())["trials"]
            ca, cb = {key(t) for t in a if t["complete"]}, {key(t) for t in b if t["complete"]}
            same_front = {key(t) for t in front_of(a)} == {key(t) for t in front_of(b)}
            same_pick = (
                pick_by(a, "max_consistency", [], {}, 0.0)["params"]
                == pick_by(b, "max_consistency", [], {}, 0.0)["params"]
            )
            ta, tb = sum(t["tokens"] for t in a), sum(t["tokens"] for t in b)
            where = sorted(t["pruned"]["queries_scored"] for t in b if not t["complete"])
            md.append(
                f"| {lab} | {off.parent.name[4:]} | {len(ca & cb)}/{len(ca)} | {same_front} | {same_pick} "
                f"| {ta:,} | {tb:,} | {1 - tb / ta:.1%} | {len(where)} ({', '.join(map(str, where)) or '—'}) |"
            )
    return md


PAPER_GPU_HOURS = 19.9  # 100 trials × 512 samples × 3,500 tokens at 2,500 tokens/s (docs/lab.md, "Projection")


PAPER_TRIALS = 100


def projection_rows(reps: dict[int, dict]) -> list[str]:
    """GPU-hours of a qwen7b search per configuration, with and without search.stop: the paper's
    19.9 scaled by the tokens the configuration generated on the labs against 100 trials of the
    default (its median tokens per trial). A study the rule did not stop ran the labs' 50 trials,
    so at 7B it would run 100: counted as 100 × its own tokens per trial."""
    per_trial = statistics.median(
        r["tokens"] / r["trials"] for rep in reps.values() for r in rep["runs"] if r["config"] == "tpe"
    )
    full = PAPER_TRIALS * per_trial
    md = [
        "| config | runs | stop fired | trials kept (median) | GPU-h without stop | GPU-h with stop | × the paper |",
        "|---|---|---|---|---|---|---|",
    ]
    for cfg in CONFIGS:
        rows = [r for rep in reps.values() for r in rep["runs"] if r["config"] == cfg]
        if not rows:
            continue
        without = [PAPER_GPU_HOURS * PAPER_TRIALS * r["tokens"] / r["trials"] / full for r in rows]
        fired = [r["stop"]["trials"] < r["trials"] for r in rows]
        with_stop = [
            PAPER_GPU_HOURS * (r["stop"]["tokens"] if f else PAPER_TRIALS * r["tokens"] / r["trials"]) / full
            for r, f in zip(rows, fired)
        ]
        md.append(
            f"| {cfg} | {len(rows)} | {sum(fired)}/{len(rows)} "
            f"| {median_or([r['stop']['trials'] for r in rows], '{:.0f}')} "
            f"| {median_or(without, '{:.1f}')} | {median_or(with_stop, '{:.1f}')} "
            f"| {statistics.median(with_stop) / PAPER_GPU_HOURS:.2f} |"
        )
    return md


REMEDIES = [("tpe", r) for r in RULES] + [("tpe-range", r) for r in RULES if r != "away"]


def remedy_rows(reps: dict[int, dict]) -> list[str]:
    md = [
        "| remedy (config · pick) | "
        + " | ".join(f"lab {lab}" for lab in reps)
        + " | labs where ≥ 2/3 of runs beat both | paired vs tpe · max_consistency | vs best grid | vs best classic |",
        "|" + "---|" * (len(reps) + 5),
    ]
    for cfg, rule in REMEDIES:
        cells, labs_ok, vs_grid, vs_merge = [], 0, [], []
        for rep in reps.values():
            rows = [r for r in rep["runs"] if r["config"] == cfg]
            if not rows:
                cells.append("—")
                continue
            wins = sum(r[rule]["gt"] > best_source(rep) for r in rows)
            labs_ok += 3 * wins >= 2 * len(rows)
            cells.append(f"{median_or([r[rule]['gt'] for r in rows])} ({wins}/{len(rows)})")
            vs_grid += [r[rule]["gt"] - rep["best_grid"] for r in rows]
            vs_merge += [r[rule]["gt"] - rep["best_merge"] for r in rows]
        paired_diff = fmt_ci(paired(reps, ("tpe", "max_consistency"), (cfg, rule)))
        md.append(
            f"| {cfg} · {rule} | "
            + " | ".join(cells)
            + f" | {labs_ok}/{len(reps)} | {paired_diff} | {fmt_ci(vs_grid)} | {fmt_ci(vs_merge)} |"
        )
    return md


def per_lab_rows(
    reps: dict[int, dict], candidates: Sequence[tuple[str, str]], base: tuple[str, str] = ("tpe", "max_consistency")
) -> list[str]:
    """Per lab and over all runs, paired gt(candidate) − gt(base), mean [95% bootstrap]: no lab may lose."""
    md = [
        "| candidate | " + " | ".join(f"lab {lab}" for lab in reps) + " | all |",
        "|" + "---|" * (len(reps) + 2),
    ]
    for cand in candidates:
        cells = [fmt_ci(paired({lab: rep}, base, cand)) for lab, rep in reps.items()]
        md.append(f"| {cand[0]} · {cand[1]} | " + " | ".join(cells) + f" | {fmt_ci(paired(reps, base, cand))} |")
    return md


def cmd_report(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    reps = {lab: rep for lab in args.labs if (rep := lab_report(lab, args.test_size)) is not None}
    md = ["# Five-lab study (benchmarks/pick/study.py)", "", "## Ground truth and label-free signals per lab", ""]
    md += signal_rows(reps)
    md += ["", "Where the default's fronts lie (tpe, λ ∈ [0, 2]; a λ < 0.5 is outside the range [0.5, 2]):", ""]
    md += front_rows(reps)
    md += ["", "## Cost levers (#30), max-consistency pick", ""]
    md += ["Medians over (lab, seed) runs; paired: gt(config) − gt(tpe) on the same lab and seed, "
           "mean [95% bootstrap interval].", ""]  # fmt: skip
    md += cost_rows(reps)
    md += ["", "## Projection: GPU-hours of a qwen7b search (medians over the runs)", ""]
    md += projection_rows(reps)
    md += ["", "## Pruning against its control (blocks of 16, prune off)", ""]
    md += prune_rows(reps)
    md += ["", "## Remedies (#31): the pick against ground truth", ""]
    md += ["Per lab: median pick accuracy in % over seeds (runs beating both sources / runs); "
           "differences in points.", ""]  # fmt: skip
    md += remedy_rows(reps)
    md += ["", "Per lab, paired against the default (tpe · max_consistency at the full budget):", ""]
    md += per_lab_rows(
        reps,
        [("tpe", "away"), ("tpe-range", "max_consistency"), ("tpe-range", "agreement"), ("tpe-range", "stop"),
         ("tpe-range-prune", "stop"), ("tpe-range-prune32", "stop"), ("tpe-range-adaptive", "stop")],
    )  # fmt: skip
    md += ["", "Per lab, paired against the range with full sampling, both stopped (tpe-range · stop):", ""]
    md += per_lab_rows(
        reps,
        [("tpe-range-adaptive", "stop"), ("tpe-range-prune", "stop"), ("tpe-range", "agreement")],
        ("tpe-range", "stop"),
    )
    out = root()
    (out / "results.md").write_text("\n".join(md) + "\n")
    write_json(out / "results.json", {str(k): v for k, v in reps.items()})
    plot_signals(reps, out / "signals.png")
    print("\n".join(md))
