"""`report` of benchmarks/pick/confirm.py: ground truth of the sources, the 5×5 λ grid and every
variant's pick (greedy accuracy on the lab's test problems, cached per lab: each λ scored once),
and the tables: per lab × variant, per variant overall (paired with today's pick), the lab facts."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

from benchmarks.harness.lab import lab_paths, locked, out_root
from benchmarks.harness.results import write_json
from benchmarks.pick.confirm_jobs import VARIANTS, root
from benchmarks.pick.picks import fmt_ci
from benchmarks.pick.truth import GRID, GroundTruth


def runs_of(lab: int) -> list[dict]:
    """The lab's jobs whose every variant is applied, by seed."""
    out = []
    for path in sorted((root() / f"lab{lab}").glob("seed*/result.json")):
        res = json.loads(path.read_text())
        if set(VARIANTS) <= set(res.get("variants", {})):
            out.append(res)
    return sorted(out, key=lambda r: r["seed"])


POOLED = ("max_consistency", "smoothed")  # pooled-<rule>: derived from confirm-<rule>'s rows, no extra tokens
REPORTED = [*VARIANTS, *(f"pooled-{rule}" for rule in POOLED), "knee"]


def picks_of(r: dict) -> dict[str, dict]:
    """Every reported variant's pick in a job: the stored ones, and pooled-<rule>: among
    confirm-<rule>'s candidates the highest mean of the search's C and the fresh C (both on the
    selection with k = 8: 16 samples per query), ties → the rule's rank."""
    out = {name: r["variants"][name] for name in VARIANTS}
    by_number = {t["number"]: t for t in r["trials"]}
    for rule in POOLED:
        v = r["variants"][f"confirm-{rule}"]
        best = min(v["candidates"], key=lambda c: (-(c["search"]["consistency"] + c["consistency"]), c["rank"]))
        out[f"pooled-{rule}"] = {"trial": best["trial"], "params": by_number[best["trial"]]["params"],
                                 "tokens": v["tokens"]}  # fmt: skip
    out["knee"] = knee_of(r)
    return out


def knee_of(r: dict) -> dict:
    """dots' `knee` rule (the front's point nearest the ideal, C against PPL) on the job's trial rows."""
    from dots.search.pick.pareto import Point
    from dots.search.pick.rules import rank

    points = [Point(t["number"], t["consistency"], t["perplexity"], t["params"]) for t in r["trials"] if t["complete"]]
    p = rank("knee", points)[0]
    return {"trial": p.number, "params": dict(p.params), "tokens": 0}


def gt_key(params: dict) -> str:
    """GroundTruth.merge's cache key of a λ."""
    return "lambda:" + ",".join(f"{s}={params[s]:.10f}" for s in ("sft", "rlvr"))


def lab_truth(lab: int, test_size: int, lock_held: bool = False, limit: int | None = None, oracle: bool = True) -> bool:
    """Score what the lab's truth cache lacks (the picks first, then the sources, then the grid;
    at most `limit` of them); True if anything was scored. Callers hold the lab's truth lock (or
    pass lock_held=False to wait for it)."""
    if lock_held:
        return _truth(lab, test_size, limit, oracle)
    with locked(root() / f"lab{lab}" / ".truth.lock"):
        return _truth(lab, test_size, limit, oracle)


def _truth(lab: int, test_size: int, limit: int | None, oracle: bool) -> bool:
    runs = runs_of(lab)
    todo: list = [("merge", v["params"]) for r in runs for v in picks_of(r).values()]
    todo += [("model", s) for s in ("base", "sft", "rlvr")]
    todo += [("merge", {"sft": a, "rlvr": b}) for a in GRID for b in GRID]
    todo += [("merge", t["params"]) for r in runs for t in r["trials"] if t["complete"] and oracle]
    path = out_root() / f"lab{lab}" / f"gt-{test_size}.json"  # GroundTruth's cache and its keys
    cached = json.loads(path.read_text()) if path.exists() else {}
    keys = [gt_key(w) if k == "merge" else f"model:{w}" for k, w in todo]
    if all(k in cached for k in keys):
        return False  # (loading the lab's engine for nothing costs seconds of a shared CPU)
    gt = GroundTruth(lab, test_size)
    before = len(gt.cache)
    for kind, what in todo:
        if limit is not None and len(gt.cache) - before >= limit:
            break
        gt.merge(what) if kind == "merge" else gt.checkpoint(what, gt.paths[what])
    return len(gt.cache) > before


def lab_summary(lab: int, test_size: int, oracle: bool = True) -> dict | None:
    runs = runs_of(lab)
    if not runs or lab_paths(lab) is None:
        return None
    lab_truth(lab, test_size, oracle=oracle)
    gt = GroundTruth(lab, test_size)
    models = {s: gt.checkpoint(s, gt.paths[s])["all"] for s in ("base", "sft", "rlvr")}
    grid = {(a, b): gt.merge({"sft": a, "rlvr": b})["all"] for a in GRID for b in GRID}
    best = max(grid, key=lambda k: grid[k])
    out: dict[str, Any] = {"models": models, "best_grid": grid[best], "best_grid_lambda": list(best),
                           "grid": {f"{a},{b}": v for (a, b), v in grid.items()}, "runs": []}  # fmt: skip
    for r in runs:
        row: dict[str, Any] = {"seed": r["seed"], "trials": len(r["trials"]), "study_tokens": r["study_tokens"]}
        for name, v in picks_of(r).items():
            row[name] = {"trial": v["trial"], "params": v["params"], "gt": gt.merge(v["params"])["all"],
                         "tokens": v["tokens"]}  # fmt: skip
        scored = [gt.cache.get(gt_key(t["params"])) for t in r["trials"] if t["complete"]]
        row["oracle"] = max(x["all"] for x in scored) if all(scored) else None  # (all scored, or None)
        out["runs"].append(row)
    return out


def acc(x: float) -> str:
    return f"{100 * x:.1f}"  # accuracy in %


def lab_rows(reps: dict[int, dict]) -> list[str]:
    md = ["| lab | base | SFT | RLVR | best grid cell (λ_SFT, λ_RLVR) | best trial of the study (seed mean) | seeds "
          "| trials (median) | study tokens (median) |",
          "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for lab, rep in reps.items():
        m, runs = rep["models"], rep["runs"]
        oracle = statistics.mean(r["oracle"] for r in runs) if all(r["oracle"] for r in runs) else None
        trials, tokens = (statistics.median(r[k] for r in runs) for k in ("trials", "study_tokens"))
        md.append(
            f"| {lab} | {acc(m['base'])} | {acc(m['sft'])} | {acc(m['rlvr'])} | {acc(rep['best_grid'])} "
            f"{tuple(rep['best_grid_lambda'])} | {acc(oracle) if oracle else '—'} | {len(runs)} | "
            f"{trials:.0f} | {tokens:,.0f} |"
        )
    return md


def beats(rep: dict, r: dict, v: str) -> bool:
    return r[v]["gt"] > max(rep["models"]["sft"], rep["models"]["rlvr"])


def per_lab_rows(reps: dict[int, dict], cell: Any) -> list[str]:
    md = ["| lab | " + " | ".join(REPORTED) + " |", "|---" * (len(REPORTED) + 1) + "|"]
    for lab, rep in reps.items():
        md.append(f"| {lab} | " + " | ".join(cell(rep, v) for v in REPORTED) + " |")
    return md


def mean_cell(rep: dict, v: str) -> str:
    runs = rep["runs"]
    return f"{acc(statistics.mean(r[v]['gt'] for r in runs))} ({sum(beats(rep, r, v) for r in runs)}/{len(runs)})"


def grid_cell(rep: dict, v: str) -> str:
    return fmt_ci([r[v]["gt"] - rep["best_grid"] for r in rep["runs"]])


def today_cell(rep: dict, v: str) -> str:
    return "—" if v == "today" else fmt_ci([r[v]["gt"] - r["today"]["gt"] for r in rep["runs"]])


def overall_rows(reps: dict[int, dict]) -> list[str]:
    md = ["| variant | runs | mean accuracy | paired vs today | vs best grid cell | labs at or above the best grid "
          "(seed mean) | runs beating both sources | labs where every run beats both | pick differs from today | "
          "tokens vs today: median | max |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for v in REPORTED:
        runs = [(rep, r) for rep in reps.values() for r in rep["runs"]]
        ratio = [(r["study_tokens"] + r[v]["tokens"]) / r["study_tokens"] for _, r in runs]
        at_grid = sum(statistics.mean(r[v]["gt"] for r in rep["runs"]) >= rep["best_grid"] - 1e-12
                      for rep in reps.values())  # fmt: skip
        every = sum(all(beats(rep, r, v) for r in rep["runs"]) for rep in reps.values())
        md.append(
            f"| {v} | {len(runs)} | {acc(statistics.mean(r[v]['gt'] for _, r in runs))} | "
            f"{'—' if v == 'today' else fmt_ci([r[v]['gt'] - r['today']['gt'] for _, r in runs])} | "
            f"{fmt_ci([r[v]['gt'] - rep['best_grid'] for rep, r in runs])} | {at_grid}/{len(reps)} | "
            f"{sum(beats(rep, r, v) for rep, r in runs)}/{len(runs)} | {every}/{len(reps)} | "
            f"{sum(r[v]['trial'] != r['today']['trial'] for _, r in runs)}/{len(runs)} | "
            f"{statistics.median(ratio):.3f} | {max(ratio):.3f} |"
        )
    return md


def cmd_report(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    reps = {lab: rep for lab in args.labs if (rep := lab_summary(lab, args.test_size, args.oracle)) is not None}
    md = ["# Beyond the grid: confirmation and smoothed picks (benchmarks/pick/confirm.py, #42)", "",
          "## Labs (greedy accuracy in % on the test problems, differences in points; search seeds measured)",
          ""]  # fmt: skip
    md += lab_rows(reps)
    md += ["", "## Per lab: mean pick accuracy over search seeds (runs beating both sources / runs)", ""]
    md += per_lab_rows(reps, mean_cell)
    md += ["", "## Per lab: pick − best 5×5 grid cell, mean [95% bootstrap interval] over search seeds", ""]
    md += per_lab_rows(reps, grid_cell)
    md += ["", "## Per lab: paired with today's pick (same study), mean [95% bootstrap interval]", ""]
    md += per_lab_rows(reps, today_cell)
    md += ["", "## Per variant, all (lab, seed) runs", "",
           "Tokens: (study + the variant's confirmation) / the study's, per run.", ""]  # fmt: skip
    md += overall_rows(reps)
    out = root()
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text("\n".join(md) + "\n")
    write_json(out / "results.json", {str(k): v for k, v in reps.items()})
    print("\n".join(md))


def both_sets() -> dict[str, dict]:
    """results.json of today's studies and of --set's (when given), their runs pooled per lab;
    root() is today's again afterwards."""
    from benchmarks.pick import confirm_jobs as lab_confirm_jobs

    with_set = json.loads((root() / "results.json").read_text()) if lab_confirm_jobs.SETTINGS else {}
    lab_confirm_jobs.SETTINGS[:] = []
    today = json.loads((root() / "results.json").read_text())
    return {lab: {**rep, "runs": rep["runs"] + with_set.get(lab, {}).get("runs", [])} for lab, rep in today.items()}


def cmd_pooled(args: argparse.Namespace) -> None:
    """The tables of `report` over the runs of today's studies and those of `--set` together (each
    `report` first): lab_confirm/pooled.md."""
    from benchmarks.pick import confirm_jobs as lab_confirm_jobs

    settings = list(lab_confirm_jobs.SETTINGS)
    reps = {int(lab): rep for lab, rep in both_sets().items()}
    md = [f"# Pooled: today's studies and those with {' '.join(settings)} (benchmarks/pick/confirm.py pooled)", "",
          "## Per lab: pick − best 5×5 grid cell, mean [95% bootstrap interval] over both sets' runs", ""]  # fmt: skip
    md += per_lab_rows(reps, grid_cell)
    md += ["", "## Per lab: paired with today's pick (same study)", ""]
    md += per_lab_rows(reps, today_cell)
    md += ["", "## Per variant, all runs", ""]
    md += overall_rows(reps)
    (root() / "pooled.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
