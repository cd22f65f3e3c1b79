"""The jobs of benchmarks/pick/confirm.py: one study per (lab, search seed) with today's defaults
(λ ∈ [0.5, 2], adaptive sampling, the hypervolume stop rule, the lab's max-consistency pick), kept
as an optuna sqlite study in the job's directory, then every pick variant applied to it with dots'
own code (`rank`, and `confirm_candidates` / `confirmed_choice` as dots.search.steps.build_confirm
runs them), cached in the job's result.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.harness.lab import out_root, search_cfg
from benchmarks.harness.results import write_json
from benchmarks.pick.picks import surrogate_maximum
from benchmarks.pick.samplers_study import MemoScorer
from benchmarks.pick.study_runs import trial_rows

TODAY = ["search.range=[0.5,2.0]", "search.adaptive.enabled=true"]  # the defaults search_cfg resets for old studies
SETTINGS: list[str] = []  # --set: overrides of today's defaults; their studies live in lab_confirm/set-<hash>
STUDY_NAME = "lab-confirm"
CANDIDATE_KEYS = ("trial", "rank", "coefficients", "search", "consistency", "interval", "tokens")

# name → (rule, confirmation or None); a confirmation is ConfirmOptions' fields (enabled=True) and
# `propose` (0 or 1): the smoothed C's maximum as one more candidate (#42's "points proposed around the best")
VARIANTS: dict[str, tuple[str, dict | None]] = {
    "today": ("max_consistency", None),
    "agreement": ("agreement", None),
    "smoothed": ("smoothed", None),
    "confirm-max_consistency": ("max_consistency", {"top": 3, "k": 8, "queries": "selection"}),
    "confirm-smoothed": ("smoothed", {"top": 3, "k": 8, "queries": "selection"}),
    "confirm-agreement": ("agreement", {"top": 3, "k": 8, "queries": "selection"}),
    "confirm-held-out": ("max_consistency", {"top": 3, "k": 8, "queries": "held_out"}),
    "confirm-proposal": ("smoothed", {"top": 3, "k": 8, "queries": "selection", "propose": 1}),
}
PROPOSAL = -1  # the trial number of a proposed candidate (no trial scored it)


def root() -> Path:
    base = out_root().parent / "lab_confirm"
    if not SETTINGS:
        return base
    from dots.keys import stable_hash

    return base / f"set-{stable_hash(sorted(SETTINGS))[:8]}"


def jobs(labs: Sequence[int], seeds: Sequence[int], n_trials: int) -> list[dict]:
    """Seed-major: every lab's first seed before any lab's second (a short run covers all labs)."""
    return [{"lab": lab, "seed": s, "n_trials": n_trials} for s in seeds for lab in labs]


def job_dir(job: dict) -> Path:
    return root() / f"lab{job['lab']}" / f"seed{job['seed']}"


def finished(job: dict) -> bool:
    path = job_dir(job) / "result.json"
    if not path.exists():
        return False
    return set(VARIANTS) <= set(json.loads(path.read_text()).get("variants", {}))


def job_cfg(lab: Any, job: dict) -> Any:
    extra = [*TODAY, *SETTINGS, f"seed={job['seed']}", f"search.n_trials={job['n_trials']}", f"run_dir={job_dir(job)}"]
    return search_cfg(job["lab"], lab.paths, extra)


def pool_prompts(lab: Any, cfg: Any) -> dict[str, str]:
    """Every pool query's prompt, as Lab.__init__ (and dots' pipeline) formats them."""
    from dots.io.problems import load_pool
    from dots.scoring import format_prompt

    if getattr(lab, "pool_prompts", None) is None:
        queries = load_pool(cfg.pool)
        lab.pool_prompts = {q.id: format_prompt(q.question, cfg.backbone.prompt, lab.tokenizer) for q in queries}
    return lab.pool_prompts


def context_of(lab: Any, options: Any) -> Any:
    """dots.search.steps.pick_context for the lab: selected ids, the sources' answers, the range."""
    from dots.search.pick.diagnosis import source_answers
    from dots.search.pick.rules import PickContext

    return PickContext(lab.ids, source_answers(lab.record), options.search.answer_mode, tuple(options.search.range))


def run_job(lab: Any, job: dict) -> None:
    """The study (resumed if a worker died in it), then the variants result.json does not hold yet."""
    import optuna

    from dots.options.search import search_options
    from dots.search.study.scorer import Scorer
    from dots.search.study.storage import open_storage, open_study
    from dots.search.study.trials import run_study
    from dots.search.study.workers import recover_stale_trials

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = job_dir(job)
    cfg = job_cfg(lab, job)
    options = search_options(cfg)
    assert options.pick == "max_consistency", options.pick  # the pick before #42 (search_cfg pins it)
    sources = list(lab.tv.sources)
    path = out / "result.json"
    result = json.loads(path.read_text()) if path.exists() else None
    study = open_study(options, open_storage(None, out), STUDY_NAME)
    if result is None:
        recover_stale_trials(study, -1.0, [f"lambda_{s}" for s in sources], left_by="an interrupted run")
        scorer = Scorer(lab.engine, lab.prompts, options.search, lab.tokenizer)
        began = time.perf_counter()
        run_study(study, scorer, sources, tuple(options.search.range), int(job["n_trials"]), int(options.seed),
                  stop=options.search.stop, seeds=options.search.seeds)  # fmt: skip
        seconds = time.perf_counter() - began
        result = {**job, "ids": lab.ids, "trials": rows_of(study, sources), "study_seconds": seconds}
        trials = study.get_trials(deepcopy=False)
        result["study_tokens"] = sum(t.user_attrs.get("tokens_generated") or 0 for t in trials)  # as build_confirm
        result["variants"] = {}
        write_json(path, result)
    for name in VARIANTS:
        if name not in result["variants"]:
            began = time.perf_counter()
            result["variants"][name] = {**apply_variant(lab, cfg, options, study, name), "seconds": 0.0}
            result["variants"][name]["seconds"] = time.perf_counter() - began
            write_json(path, result)


def rows_of(study: Any, sources: list[str]) -> list[dict]:
    """lab_study's trial rows, with each complete trial's per-query C."""
    per_query = {t.number: t.user_attrs.get("per_query_consistency") for t in study.get_trials(deepcopy=False)}
    return [{**r, "per_query": per_query.get(r["number"])} for r in trial_rows(study, sources)]


def apply_variant(lab: Any, cfg: Any, options: Any, study: Any, name: str) -> dict:
    """One variant's pick on a finished study: rank(rule)[0], or the confirmation of its top
    candidates exactly as dots.search.steps.build_confirm does it (same candidates, scorer options,
    seeds and query sets), on the lab's engine; the confirmation's tokens."""
    from dots.keys import stable_hash
    from dots.options.pick import ConfirmOptions
    from dots.search.pick.confirm import confirm_candidates, confirm_options, confirmed_choice, held_out
    from dots.search.pick.report import complete_points
    from dots.search.pick.rules import rank
    from dots.search.study.scorer import Scorer

    rule, spec = VARIANTS[name]
    sources = list(lab.tv.sources)
    points = complete_points(study, sources)
    ranked = rank(rule, points, context_of(lab, options))
    if spec is None:
        p = ranked[0]
        return {"rule": rule, "trial": p.number, "params": dict(p.params), "tokens": 0, "candidates": None}
    confirm = ConfirmOptions(enabled=True, **{k: v for k, v in spec.items() if k != "propose"})
    candidates = ranked[: confirm.top] + proposals(points, int(spec.get("propose", 0)))
    ids = list(lab.ids)
    prompts = dict(zip(lab.ids, lab.prompts))
    if confirm.queries == "held_out":
        prompts = pool_prompts(lab, cfg)
        ids = held_out(list(prompts), ids, len(ids), options.seed)
    scorer = Scorer(lab.engine, [prompts[i] for i in ids], confirm_options(options.search, confirm), lab.tokenizer)
    memo = MemoScorer(scorer, job_dir_of(cfg) / f"memo-{confirm.queries}-k{confirm.k}.jsonl")  # shared by variants
    key = stable_hash({"variant": name, "confirm": spec, "pick": rule})
    rows = confirm_candidates(
        lambda lam, seed: memo(lam, seed), candidates, options.seed, job_dir_of(cfg), key, options.search.seeds
    )
    chosen = confirmed_choice(rows)
    p = next(p for p in [*points, *candidates] if p.number == chosen["trial"])
    return {
        "rule": rule, "confirm": spec, "trial": p.number, "params": dict(p.params), "n_queries": len(ids),
        "tokens": sum(r["tokens"] for r in rows), "samples": sum(r["samples"] for r in rows),
        "candidates": [{k: r[k] for k in CANDIDATE_KEYS} for r in rows],
    }  # fmt: skip


def proposals(points: list, n: int) -> list:
    """At most one proposed candidate: the maximum of the smoothed C fitted to the study's
    complete trials (`points`) over a 31 × 31 grid of the range (picks.surrogate_maximum), as a
    Point with no trial (number PROPOSAL, C the smoothed estimate there, no perplexity)."""
    from dots.search.pick.pareto import Point

    if n <= 0:
        return []
    trials = [{"complete": True, "params": dict(p.params), "consistency": p.consistency} for p in points]
    at, c_hat = surrogate_maximum(trials)
    return [Point(PROPOSAL, c_hat, float("nan"), at)]


def job_dir_of(cfg: Any) -> Path:
    return Path(str(cfg.run_dir))
