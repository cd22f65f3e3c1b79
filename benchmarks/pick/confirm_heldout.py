"""`heldout` of benchmarks/pick/confirm.py: every pick against a grid search that chooses its cell
with labels it is not scored on.

A lab's test split has 2,048 problems; `report` scores the picks and the 5×5 grid on the first
1,024 (half A) and compares each pick with the grid's best cell *on those same problems*: a cell
chosen by the labels it is then scored on, whose accuracy carries the winner's curse of a maximum
over 25 noisy accuracies. This scores the grid and every pick on the other 1,024 (half B, disjoint
from A and from the unlabeled pool) and reports, per lab and variant over the runs of today's
studies and `--set`'s (each `report` first), mean [95% bootstrap interval]:

    as asked    acc_A(pick) − max_cell acc_A(cell)
    all 2,048   acc_AB(pick) − max_cell acc_AB(cell)            (the same oracle, twice the problems)
    cross-fit   ½[acc_A(pick) − acc_A(argmax_B cell)] + ½[acc_B(pick) − acc_B(argmax_A cell)]
                (the grid search a user with 1,024 labeled problems runs: choose on one half,
                 report the other; the pick's own accuracy is on the same halves; cells tied on
                 the choosing half are averaged)

and, where `population` ran, the same comparisons for the maximum of C itself (the λ of the
population grid with the highest mean C over 16 scorings, within the range): what a pick that knew
C exactly would get.

    python -m benchmarks.pick confirm heldout --set search.seeds=common   # → lab_confirm/heldout.md
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Callable

from benchmarks.harness.lab import locked
from benchmarks.pick.confirm_jobs import root
from benchmarks.pick.confirm_report import REPORTED, both_sets, gt_key
from benchmarks.pick.picks import fmt_ci
from benchmarks.pick.truth import GRID, GroundTruth

SHOWN = ("today", "smoothed", "confirm-smoothed", "confirm-agreement", "confirm-proposal", "C max")  # the columns


def population_max(lab: int, low: float = 0.5, high: float = 2.0) -> dict | None:
    """The row of `population`'s grid with the highest mean C on the lab within the search's
    range [low, high] of every λ (None if not scanned)."""
    path = root() / "population.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    rows = [r for r in rows if r["lab"] == lab and all(low <= x <= high for x in r["lambda"].values())]
    return max(rows, key=lambda r: r["consistency"], default=None)


def half_b(lab: int, rep: dict, size: int) -> dict[str, float]:
    """Accuracy on half B of the grid's cells, of every reported pick and of C's population maximum
    (cached: gt-<size>@<size>.json)."""
    with locked(root() / f"lab{lab}" / ".truth.lock"):
        gt = GroundTruth(lab, size, offset=size)
        todo = [{"sft": a, "rlvr": b} for a in GRID for b in GRID]
        todo += [r[v]["params"] for r in rep["runs"] for v in REPORTED if v in r]
        todo += [top["lambda"]] if (top := population_max(lab)) else []
        return {gt_key(w): gt.merge(w)["all"] for w in todo}


def lab_diffs(rep: dict, b: dict[str, float]) -> dict[str, Callable[[str], list[float]]]:
    """Per comparison, the per-run differences of a variant's pick from the grid's cell."""
    a = {gt_key({"sft": float(x), "rlvr": float(y)}): v for k, v in rep["grid"].items() for x, y in [k.split(",")]}
    ab = {k: (a[k] + b[k]) / 2 for k in a}
    top_ab = max(ab.values())

    def chosen_on(on: dict[str, float], scored: dict[str, float]) -> float:
        """`scored` accuracy of the cell with the best `on` accuracy; tied cells averaged (a fair tie-break)."""
        best = max(on[k] for k in a)
        return statistics.mean(scored[k] for k in a if on[k] == best)

    runs = list(rep["runs"])
    if (top := population_max(rep["lab"])) is not None:  # C's maximum: a variant with one run
        runs.append({"C max": {"params": top["lambda"], "gt": top["accuracy"]}})

    def acc_b(r: dict, v: str) -> float:
        return b[gt_key(r[v]["params"])]

    return {
        "as asked": lambda v: [r[v]["gt"] - max(a.values()) for r in runs if v in r],
        "all 2,048": lambda v: [(r[v]["gt"] + acc_b(r, v)) / 2 - top_ab for r in runs if v in r],
        "cross-fit": lambda v: [
            ((r[v]["gt"] - chosen_on(b, a)) + (acc_b(r, v) - chosen_on(a, b))) / 2 for r in runs if v in r
        ],
    }


def cmd_heldout(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    reps = {int(lab): {**rep, "lab": int(lab)} for lab, rep in both_sets().items() if int(lab) in args.labs}
    diffs = {lab: lab_diffs(rep, half_b(lab, rep, args.test_size)) for lab, rep in reps.items()}
    counts = ", ".join(f"{lab}: {len(rep['runs'])}" for lab, rep in reps.items())
    md = ["# The picks against a grid search that chooses with other labels (benchmarks/pick/confirm.py heldout)",
          "", f"Runs per lab: {counts}. "
          "Pick − the grid's cell, mean [95% bootstrap interval] over the runs; labs at or above (seed mean). "
          "C max: `population`'s λ with the highest mean C in [0.5, 2] (one point per lab).", ""]  # fmt: skip
    for name in ("as asked", "all 2,048", "cross-fit"):
        md += [f"## {name}", "", "| lab | " + " | ".join(SHOWN) + " |", "|---" * (len(SHOWN) + 1) + "|"]
        for lab in reps:
            md.append(f"| {lab} | " + " | ".join(fmt_ci(diffs[lab][name](v)) for v in SHOWN) + " |")
        means = {v: [statistics.mean(d) for lab in reps if (d := diffs[lab][name](v))] for v in SHOWN}
        md += ["| labs at or above | " + " | ".join(f"{sum(m >= -1e-12 for m in means[v])}/{len(means[v])}"
                                                    for v in SHOWN) + " |", ""]  # fmt: skip
    (root() / "heldout.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
