"""The jobs of benchmarks/pick/study.py: every configuration's overrides, the jobs (a λ grid per lab,
then each configuration on each seed) and their directories, and one job run — a study with
dots' own study loop on a lab, or the 5×5 λ grid under the full scorer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.harness.lab import out_root, search_cfg
from benchmarks.harness.results import write_json
from benchmarks.pick.samplers_study import MemoScorer
from benchmarks.pick.truth import GRID

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


def root() -> Path:
    return out_root().parent / "lab_study"


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
    cfg = search_cfg(
        job["lab"],
        lab.paths,
        [*spec["overrides"], f"seed={job['seed']}", f"search.n_trials={job['n_trials']}", f"run_dir={out}"],
    )
    sources = list(lab.tv.sources)
    study = open_study(search_options(cfg), open_storage(None, out), "lab-study")
    scorer: Any = Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer)
    if spec["memo"]:
        scorer = MemoScorer(scorer, lab.dir / f"memo-{spec['memo']}.jsonl")
    began = time.perf_counter()
    run_study(study, scorer, sources, tuple(cfg.search.range), int(job["n_trials"]), int(cfg.seed))
    write_json(
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

    cfg = search_cfg(job["lab"], lab.paths, ["seed=0"])
    scorer = MemoScorer(
        Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer), lab.dir / "memo-full.jsonl"
    )
    points = []
    for a in GRID:
        for b in GRID:
            r = scorer({"sft": a, "rlvr": b}, seed=0)
            points.append({"params": {"sft": a, "rlvr": b}, "consistency": r.consistency, "perplexity": r.perplexity,
                           "answers": r.answers, "tokens": r.tokens})  # fmt: skip
    job_dir(job).mkdir(parents=True, exist_ok=True)
    write_json(job_dir(job) / "result.json", {**job, "ids": lab.ids, "points": points, "reference": lab.reference})
