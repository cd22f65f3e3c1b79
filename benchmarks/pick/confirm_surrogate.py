"""`python -m benchmarks.pick confirm surrogate`: two checks beside the pick variants of #42, on the
finished studies of `run` (no tokens; ground truth cached per lab like every pick's).

- The surrogate's maximum as a pick: dots' smoothed C (dots.search.pick.smoothing, fitted to a
  study's complete trials) maximised over a 31 × 31 grid of [0.5, 2]², that λ scored by greedy
  accuracy and paired with today's pick — what proposing points there would aim at.
- How flat the top is: a finer grid around the best 5×5 cells (λ_SFT ∈ FINE_SFT × λ_RLVR ∈
  FINE_RLVR), its best point against the best 5×5 cell.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from benchmarks.harness.results import write_json
from benchmarks.pick.confirm_jobs import root
from benchmarks.pick.picks import fmt_ci, surrogate_maximum
from benchmarks.pick.truth import GroundTruth

FINE_SFT = (0.5, 0.55, 0.6, 0.7)
FINE_RLVR = (0.5, 0.75, 1.0, 1.25, 1.5)


def lab_surrogate(lab: int, test_size: int) -> dict | None:
    runs = [json.loads(p.read_text()) for p in sorted((root() / f"lab{lab}").glob("seed*/result.json"))]
    runs = [r for r in runs if "today" in r.get("variants", {})]
    if not runs:
        return None
    gt = GroundTruth(lab, test_size)
    paired = []
    for r in runs:
        point, _ = surrogate_maximum(r["trials"])
        paired.append({"seed": r["seed"], "lambda": point, "accuracy": gt.merge(point)["all"],
                       "today": gt.merge(r["variants"]["today"]["params"])["all"]})  # fmt: skip
    grid = max(
        gt.merge({"sft": a, "rlvr": b})["all"] for a in (0.0, 0.5, 1.0, 1.5, 2.0) for b in (0.0, 0.5, 1.0, 1.5, 2.0)
    )
    fine = {f"{a},{b}": gt.merge({"sft": a, "rlvr": b})["all"] for a in FINE_SFT for b in FINE_RLVR}
    return {"runs": paired, "best_grid": grid, "fine": fine}


def cmd_surrogate(args: Any) -> None:
    reps = {lab: rep for lab in args.labs if (rep := lab_surrogate(lab, args.test_size))}
    lines = ["| lab | today (mean) | surrogate's maximum (mean) | paired | best 5×5 cell | best fine-grid point (λ) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    diffs = []
    for lab, rep in reps.items():
        d = [r["accuracy"] - r["today"] for r in rep["runs"]]
        diffs += d
        at, best = max(rep["fine"].items(), key=lambda kv: kv[1])
        lines.append(
            f"| {lab} | {100 * statistics.mean(r['today'] for r in rep['runs']):.1f} | "
            f"{100 * statistics.mean(r['accuracy'] for r in rep['runs']):.1f} | {fmt_ci(d)} | "
            f"{100 * rep['best_grid']:.1f} | {100 * best:.1f} ({at}) |"
        )
    lines.append(f"| all ({len(diffs)} runs) | | | {fmt_ci(diffs)} | | |")
    print("\n".join(lines))
    write_json(root() / "surrogate.json", {str(k): v for k, v in reps.items()})
    (root() / "surrogate.md").write_text("\n".join(lines) + "\n")


POP_SFT = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 1.0)
POP_RLVR = (0.5, 1.0, 1.5)
POP_SEEDS = 16  # × k = 8 samples per query: the population C a search's estimates scatter around


def cmd_population(args: Any) -> None:
    """The consistency each λ of a grid would score on average (the mean of POP_SEEDS scorings at
    k = 8 on the lab's selection, full k, seeds 1000 + s shared by every λ), beside its accuracy:
    where C's maximum is, and how accurate it is → lab_confirm/population.jsonl."""
    from benchmarks.harness.lab import Lab, search_cfg
    from dots.options.search import search_options
    from dots.search.study.scorer import Scorer

    out = root() / "population.jsonl"
    for lab in args.labs:
        rows = []
        the_lab, gt = Lab(lab), GroundTruth(lab, args.test_size)
        cfg = search_cfg(lab, the_lab.paths, ["search.k=8", "search.adaptive.enabled=false"])
        scorer = Scorer(the_lab.engine, the_lab.prompts, search_options(cfg).search, the_lab.tokenizer)
        for a in POP_SFT:
            for b in POP_RLVR:
                point = {"sft": a, "rlvr": b}
                cs = [scorer(point, 1000 + s).consistency for s in range(POP_SEEDS)]
                row = {"lab": lab, "lambda": point, "consistency": statistics.mean(cs), "per_seed": cs,
                       "accuracy": gt.merge(point)["all"]}  # fmt: skip
                with open(out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                rows.append(row)
                print(lab, a, b, f"C={row['consistency']:.4f} accuracy={row['accuracy']:.4f}", flush=True)
        independent, common = difference_spread(rows)
        print(f"lab {lab}: spread of two nearby λ's C difference: {independent:.4f} independent, {common:.4f} common")


def difference_spread(rows: list[dict]) -> tuple[float, float]:
    """Mean over pairs of λ with λ_SFT in [0.45, 0.8], at most 0.1 apart: the sd of their C difference
    with independent draws (√(var_a + var_b)) and with common ones (sd of the per-seed differences)."""
    import itertools

    near = [r for r in rows if 0.45 <= r["lambda"]["sft"] <= 0.8]
    pairs = [(x, y) for x, y in itertools.combinations(near, 2) if abs(x["lambda"]["sft"] - y["lambda"]["sft"]) < 0.11]
    independent = [(statistics.variance(x["per_seed"]) + statistics.variance(y["per_seed"])) ** 0.5 for x, y in pairs]
    common = [statistics.stdev([a - b for a, b in zip(x["per_seed"], y["per_seed"])]) for x, y in pairs]
    return statistics.mean(independent), statistics.mean(common)
