"""Five labs: what the search's cost levers keep (#30) and why the label-free pick fails, with
remedies (#31), against each lab's ground truth.

Every study runs dots' own search pieces on a lab (a trio of `python -m dots.lab seed=L`), as
`benchmarks/lab_samplers.py` does (its `Lab`: dots' selection, n = 64 queries; the `Scorer`,
k = 8; `open_study` / `run_study`; the lab's batched sampler as the engine). Configurations:

    tpe           the defaults before this study (sampler=tpe, λ ∈ [0, 2], one generation call per
                  trial, no stopping); every configuration searches [0, 2] unless it says otherwise
    gp            sampler=gp
    tpe-adaptive  search.adaptive.enabled=true
    tpe-b16       search.batch=16 (the blocks pruning needs; first search seed only: the control
                  for pruning's identity)
    tpe-prune     search.prune=true search.batch=16 (exact dominance pruning, for real)
    tpe-range     search.range=[0.5,2.0] (the official code's range)
    tpe-range-prune, tpe-range-prune32
                  the range with pruning in blocks of 16 or 32 queries (the candidate defaults)
    tpe-range-adaptive  the range with adaptive sampling

Stopping (`search.stop`) is replayed on each finished study with dots' own rule
(`dots.search.study.stopping.relative_gain`): a study that stops after trial t has exactly the first t
trials of the study that did not stop. Pick rules are applied to each study's trials after the
fact: `max_consistency` (the lab's rule), `agreement` (on the front, the point whose majority
answers agree most with the sources' majority answers from the selection; ties → C),
`consensus` (the same, counted only on the queries where the two sources agree), `guarded`
(max_consistency, unless the pick agrees with the sources less than they agree with each other —
the warning of dots.search.pick.diagnosis — then `agreement`), `away` (the front of the trials with
every λ ≥ 0.5). The `grid` job scores a 5×5 λ grid with the full scorer (seed 0) for the
per-lab analysis: how C, PPL and source agreement rank the grid against its ground truth.

    python benchmarks/lab_study.py all        # labs 1–4 built, 205 studies, the report: ~75 min on 2 cores
    python benchmarks/lab_study.py run &      # or by hand: one per core; resumable
    python benchmarks/lab_study.py report     # → outputs/bench/lab_study/

Labs other than 0 are looked up with `threads=1` (how they are built here: `python -m dots.lab
seed=L threads=1 eval.enabled=false`); `--lab-overrides` changes that.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lab_samplers as ls  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "tpe": {"overrides": [], "memo": "full"},
    "tpe-prune": {"overrides": ["search.prune=true", "search.batch=16"], "memo": None},
    "tpe-range": {"overrides": ["search.range=[0.5,2.0]"], "memo": "full"},
    "tpe-range-prune": {
        "overrides": ["search.range=[0.5,2.0]", "search.prune=true", "search.batch=16"],
        "memo": None,
    },
    "tpe-range-prune32": {
        "overrides": ["search.range=[0.5,2.0]", "search.prune=true", "search.batch=32"],
        "memo": None,
    },
    "tpe-range-adaptive": {"overrides": ["search.range=[0.5,2.0]", "search.adaptive.enabled=true"], "memo": "adaptive"},
    "gp": {"overrides": ["sampler=gp"], "memo": "full"},
    "tpe-adaptive": {"overrides": ["search.adaptive.enabled=true"], "memo": "adaptive"},
    "tpe-b16": {"overrides": ["search.batch=16"], "memo": "b16", "first_seed_only": True},
}
RULES = ("max_consistency", "agreement", "consensus", "guarded", "away")
STOP = {"window": 10, "threshold": 0.01}  # dots' search.stop defaults
log = logging.getLogger("lab_study")


def root() -> Path:
    return ls.out_root().parent / "lab_study"


def jobs(labs: Sequence[int], seeds: Sequence[int], n_trials: int) -> list[dict]:
    """The grid of each lab, then every configuration on the first seed, then the other seeds."""
    out = [{"kind": "grid", "lab": lab} for lab in labs]
    for i, seed in enumerate(seeds):
        for name, spec in CONFIGS.items():
            if i and spec.get("first_seed_only"):
                continue
            out += [{"kind": "study", "lab": lab, "config": name, "seed": seed, "n_trials": n_trials} for lab in labs]
    return out


def job_dir(job: dict) -> Path:
    if job["kind"] == "grid":
        return root() / f"lab{job['lab']}" / "grid"
    return root() / f"lab{job['lab']}" / job["config"] / f"seed{job['seed']}"


def trial_rows(study: Any, sources: list[str]) -> list[dict]:
    """Every scored trial (complete, or pruned by the bound) in the order it was told."""
    from optuna.trial import TrialState

    from dots.search.study.pruning import PRUNED_BY, is_bound_pruned

    rows = []
    for t in sorted(
        study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)), key=lambda t: t.number
    ):
        if t.state == TrialState.PRUNED and not is_bound_pruned(t):
            continue  # a proposal set aside as a duplicate: never scored
        a = t.user_attrs
        complete = t.state == TrialState.COMPLETE
        rows.append(
            {
                "number": t.number,
                "params": {s: t.params[f"lambda_{s}"] for s in sources},
                "complete": complete,
                "consistency": t.values[0] if complete else None,
                "perplexity": t.values[1] if complete else a[PRUNED_BY]["perplexity"],
                "pruned": None if complete else a[PRUNED_BY],
                "tokens": a.get("tokens_generated"),
                "samples": a.get("samples_drawn"),
                "answers": a.get("majority_answers"),
                "seconds": (a.get("time") or {}).get("total"),
                "fallback": "fixed_params" in t.system_attrs,
            }
        )
    return rows


def run_study_job(lab: Any, job: dict) -> None:
    import optuna

    from dots.options.search import search_options
    from dots.options.study import study_options
    from dots.search.study.scorer import Scorer
    from dots.search.study.storage import open_storage, open_study
    from dots.search.study.trials import run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = job_dir(job)
    spec = CONFIGS[job["config"]]
    cfg = ls.search_cfg(
        job["lab"],
        lab.paths,
        [*spec["overrides"], f"seed={job['seed']}", f"search.n_trials={job['n_trials']}", f"run_dir={out}"],
    )
    sources = list(lab.tv.sources)
    study = open_study(search_options(cfg), open_storage(None, out), "lab-study")
    scorer: Any = Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer)
    if spec["memo"]:
        scorer = ls.MemoScorer(scorer, lab.dir / f"memo-{spec['memo']}.jsonl")
    began = time.perf_counter()
    run_study(study, scorer, sources, tuple(cfg.search.range), int(job["n_trials"]), int(cfg.seed))
    ls.write_json(
        out / "result.json",
        {
            **job,
            "pick_rule": str(cfg.pick),
            "ids": lab.ids,
            "trials": trial_rows(study, sources),
            "study_seconds": time.perf_counter() - began,
        },
    )


def run_grid_job(lab: Any, job: dict) -> None:
    """C, PPL and majority answers of the 5×5 λ grid under the full scorer, seed 0."""
    from dots.options.study import study_options
    from dots.search.study.scorer import Scorer

    cfg = ls.search_cfg(job["lab"], lab.paths, ["seed=0"])
    scorer = ls.MemoScorer(
        Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer), lab.dir / "memo-full.jsonl"
    )
    points = []
    for a in ls.GRID:
        for b in ls.GRID:
            r = scorer({"sft": a, "rlvr": b}, seed=0)
            points.append({"params": {"sft": a, "rlvr": b}, "consistency": r.consistency, "perplexity": r.perplexity,
                           "answers": r.answers, "tokens": r.tokens})  # fmt: skip
    job_dir(job).mkdir(parents=True, exist_ok=True)
    ls.write_json(job_dir(job) / "result.json", {**job, "ids": lab.ids, "points": points, "reference": lab.reference})


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    todo = jobs(args.labs, args.seeds, args.trials)
    labs: dict[int, Any] = {}
    while True:  # any number of these processes share the jobs: each claims one by a file lock
        pending = [j for j in todo if not (job_dir(j) / "result.json").exists()]
        if not pending:
            break
        ready = [j for j in pending if j["lab"] in labs or ls.lab_paths(j["lab"]) is not None]  # built
        job, lock = ls.claim(ready, job_dir)
        if job is None:
            log.info("nothing to claim (labs being built or jobs held by other workers); waiting")
            time.sleep(20)
            continue
        try:
            if job["lab"] not in labs:
                labs[job["lab"]] = ls.Lab(job["lab"])
            t0 = time.perf_counter()
            (run_grid_job if job["kind"] == "grid" else run_study_job)(labs[job["lab"]], job)
            log.info("%s done in %.0f s", job_dir(job).relative_to(root()), time.perf_counter() - t0)
        finally:
            lock.close()


# --- report --------------------------------------------------------------------------------


def agreement_with(answers: list | None, ids: list[str], sources: dict[str, dict]) -> float | None:
    """Mean over sources of the share of selected queries where the answers agree (diagnosis.agreement)."""
    from dots.search.pick.diagnosis import agreement, same_answer

    if not answers or not sources:
        return None
    mine = dict(zip(ids, answers))
    common = [q for q in ids if all(q in s for s in sources.values())]
    same = same_answer("math")
    return sum(agreement(mine, s, common, same) for s in sources.values()) / len(sources)


def consensus_with(answers: list | None, ids: list[str], sources: dict[str, dict]) -> float | None:
    """Share of the queries where the sources' majority answers agree on which the model's agrees too."""
    from dots.search.pick.diagnosis import same_answer

    if not answers or len(sources) < 2:
        return None
    same = same_answer("math")
    a, b = list(sources.values())[:2]
    both = [q for q in ids if a.get(q) is not None and b.get(q) is not None and same(a[q], b[q])]
    mine = dict(zip(ids, answers))
    return sum(mine.get(q) is not None and same(mine[q], a[q]) for q in both) / len(both) if both else None


def source_rate(ids: list[str], sources: dict[str, dict]) -> float:
    from dots.search.pick.diagnosis import agreement, same_answer

    a, b = list(sources.values())[:2]
    common = [q for q in ids if q in a and q in b]
    return agreement(a, b, common, same_answer("math"))


def front_of(trials: list[dict]) -> list[dict]:
    from dots.search.pick.pareto import Point, pareto_front

    pts = [Point(t["number"], t["consistency"], t["perplexity"], t["params"]) for t in trials if t["complete"]]
    keep = {p.number for p in pareto_front(pts)}
    return [t for t in trials if t["number"] in keep]


def pick_by(trials: list[dict], rule: str, ids: list[str], sources: dict[str, dict], pair_rate: float) -> dict:
    """The trial a pick rule takes from `trials` (see the module docstring)."""
    if rule == "away":
        inside = [t for t in trials if min(t["params"].values()) >= 0.5]
        trials = inside or trials
    front = front_of(trials)
    best_c = min(front, key=lambda t: (-t["consistency"], t["perplexity"], t["number"]))
    if rule in ("max_consistency", "away"):
        return best_c

    def agree(t: dict) -> float:
        return agreement_with(t["answers"], ids, sources) or 0.0

    if rule == "consensus":
        return min(
            front,
            key=lambda t: (-(consensus_with(t["answers"], ids, sources) or 0.0), -t["consistency"], t["number"]),
        )
    most = min(front, key=lambda t: (-agree(t), -t["consistency"], t["perplexity"], t["number"]))
    if rule == "agreement":
        return most
    return most if agree(best_c) < pair_rate else best_c  # guarded


def stop_at(trials: list[dict]) -> int:
    """How many scored trials a study with search.stop (rule hypervolume, dots' defaults) keeps."""
    from dots.search.study.stopping import relative_gain

    history = [(t["consistency"], t["perplexity"]) if t["complete"] else None for t in trials]
    for n in range(2 * STOP["window"], len(history) + 1):
        if relative_gain(history[:n], STOP["window"]) <= STOP["threshold"]:
            return n
    return len(history)


def fixed_from(trials: list[dict], pick: Any) -> int:
    """The number of trials after which the pick (a function of a prefix) no longer changed."""
    final = pick(trials)["number"]
    n = len(trials)
    while n > 1 and any(t["complete"] for t in trials[: n - 1]) and pick(trials[: n - 1])["number"] == final:
        n -= 1
    return n


def interval(diffs: Sequence[float], reps: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of paired differences with a 95% bootstrap percentile interval."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(reps))
    return statistics.mean(diffs), means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else 0.0


def fmt_ci(diffs: Sequence[float]) -> str:
    if not diffs:
        return "—"
    m, lo, hi = interval(diffs)
    return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def med(values: Sequence[float], f: str = "{:.3f}") -> str:
    return f.format(statistics.median(values)) if values else "—"


def lab_report(lab: int, test_size: int) -> dict | None:
    """Ground truth, the picks of every rule, stopping replayed: one lab's numbers."""
    from dots.search.pick.diagnosis import source_answers

    ldir = root() / f"lab{lab}"
    runs = [json.loads(p.read_text()) for p in sorted(ldir.glob("*/seed*/result.json"))]
    if not runs:
        return None
    gt = ls.GroundTruth(lab, test_size)
    models = {s: gt.checkpoint(s, gt.paths[s])["all"] for s in ("base", "sft", "rlvr")}
    grid = {(a, b): gt.merge({"sft": a, "rlvr": b})["all"] for a in ls.GRID for b in ls.GRID}
    merges = {m: gt.checkpoint(m, p)["all"] for m, p in ls.classic_merges(lab, gt.paths).items()}
    record = next((ls.out_root() / f"lab{lab}" / "selection").glob("difficulty-*.jsonl"))
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


def paired(labs: dict[int, dict], a: tuple[str, str], b: tuple[str, str]) -> list[float]:
    """gt(b) − gt(a) over the (lab, seed) runs both have; a, b = (config, rule or 'stop')."""
    diffs = []
    for rep in labs.values():
        by = {(r["config"], r["seed"]): r for r in rep["runs"]}
        for (cfg, seed), r in by.items():
            if cfg == b[0] and (a[0], seed) in by:
                diffs.append(r[b[1]]["gt"] - by[(a[0], seed)][a[1]]["gt"])
    return diffs


def plot_signals(reps: dict[int, dict], path: Path) -> None:
    """Per lab: ground truth, C, PPL and source agreement over the 5×5 λ grid, with the picks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labs = [lab for lab, rep in reps.items() if "grid_signals" in rep]
    if not labs:
        return
    n = len(ls.GRID)
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
                i, j = ls.GRID.index(p["params"]["rlvr"]), ls.GRID.index(p["params"]["sft"])
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


def best_source(rep: dict) -> float:
    return max(rep["models"]["sft"], rep["models"]["rlvr"])


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
            f"| {lab} | {m['base']:.3f} | {m['sft']:.3f} | {m['rlvr']:.3f} | {rep['best_grid']:.3f} "
            f"{tuple(rep['best_grid_lambda'])} | {rep['merges'][top]:.3f} {top} | {cs} | {ps} | "
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
            f"| {lab} | {share:.0%} | {len(low)}/{len(runs)} | {med([r['max_consistency']['gt'] for r in low])} "
            f"| {med([r['max_consistency']['gt'] for r in high])} |"
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
            f"| {cfg} | {n} | {med([r['tokens'] for _, r in rows], '{:,.0f}')} "
            f"| {med([r['fixed']['trials'] for _, r in rows], '{:.0f}')} "
            f"| {med([r['fixed']['tokens'] for _, r in rows], '{:,.0f}')} | {wins}/{n} "
            f"| {fmt_ci(paired(reps, base, (cfg, 'max_consistency')))} "
            f"| {med([r['stop']['trials'] for _, r in rows], '{:.0f}')} "
            f"| {med([r['stop']['tokens'] for _, r in rows], '{:,.0f}')} | {stop_wins}/{n} "
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
            f"| {cfg} | {len(rows)} | {sum(fired)}/{len(rows)} | {med([r['stop']['trials'] for r in rows], '{:.0f}')} "
            f"| {med(without, '{:.1f}')} | {med(with_stop, '{:.1f}')} "
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
            cells.append(f"{med([r[rule]['gt'] for r in rows])} ({wins}/{len(rows)})")
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
    md = ["# Five-lab study (benchmarks/lab_study.py)", "", "## Ground truth and label-free signals per lab", ""]
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
    md += ["Per lab: median pick accuracy over seeds (runs beating both sources / runs).", ""]
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
    ls.write_json(out / "results.json", {str(k): v for k, v in reps.items()})
    plot_signals(reps, out / "signals.png")
    print("\n".join(md))


def cmd_all(args: argparse.Namespace) -> None:
    """The whole study in one command: build the missing labs, run the jobs with one process per
    worker, then the report."""
    import subprocess

    def together(commands: list[list[str]]) -> None:
        for i in range(0, len(commands), args.workers):
            procs = [subprocess.Popen(c) for c in commands[i : i + args.workers]]
            if any(p.wait() for p in procs):
                raise SystemExit("a step of the study failed (its output is above)")

    missing = [lab for lab in args.labs if ls.lab_paths(lab) is None]
    together([[sys.executable, "-m", "dots.lab", f"seed={lab}", *ls.LAB_OVERRIDES.get(lab, []), "eval.enabled=false"]
              for lab in missing])  # fmt: skip
    overrides = [f"{lab}:{','.join(keys)}" for lab, keys in ls.LAB_OVERRIDES.items()]
    run = [sys.executable, __file__, "run", "--labs", *map(str, args.labs), "--seeds", *map(str, args.seeds),
           "--trials", str(args.trials), "--lab-overrides", *overrides]  # fmt: skip
    together([run] * args.workers)
    cmd_report(args)


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("dots.search").setLevel(logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the grid and the studies (resumable; one process per core)")
    r.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--trials", type=int, default=50)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    q = sub.add_parser("report", help="ground truth, tables and figures from the finished jobs")
    q.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    q.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    a = sub.add_parser("all", help="build the missing labs, run every job (--workers processes), report")
    a.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    a.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    a.add_argument("--trials", type=int, default=50)
    a.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1))
    a.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    args = p.parse_args(argv)
    ls.parse_lab_overrides(
        args.lab_overrides if args.lab_overrides is not None else [f"{lab}:threads=1" for lab in args.labs if lab]
    )
    {"run": cmd_run, "report": cmd_report, "all": cmd_all}[args.cmd](args)


if __name__ == "__main__":
    main()
