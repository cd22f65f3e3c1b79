"""The studies of benchmarks/pick/samplers.py: the jobs (lab × sampler × adaptive × seed) in order
of priority, a scorer whose results are shared by a lab's studies (a memo), and one study run
with dots' own study loop, its running fronts and its picks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.harness.lab import Lab, locked, out_root, search_cfg
from benchmarks.harness.results import write_json

SAMPLERS = ("tpe", "gp", "nsga2", "random")


class MemoScorer:
    """dots' Scorer with a memo shared by the studies of a lab: a trial's result is a function of
    (λ, its scorer seed, full or adaptive) alone — the lab sampler draws from a generator seeded
    per call, one thread — so a point scored once is not generated again. With one seed, tpe, gp
    and random propose the same first `n_startup_trials` points and NSGA-II the same first
    generation, and the full-k re-score of an adaptive study's front (the hypervolume's
    currency) is the full study's trial at the same point and seed. The memo is a jsonl file per
    lab and mode (appended under a lock; other processes' rows are read on a miss)."""

    def __init__(self, scorer: Any, path: Path):
        self.scorer, self.path = scorer, path
        self.rows: dict[str, dict] = {}
        self.hits = 0

    @staticmethod
    def key(coefficients: Any, seed: int) -> str:
        return json.dumps([int(seed), sorted((k, round(float(v), 10)) for k, v in coefficients.items())])

    def _read(self) -> None:
        from dots.io.jsonl import json_lines

        for row in json_lines(self.path):
            if row is not None:  # None: a line cut by a kill
                self.rows[row["key"]] = row

    def add(self, key: str, res: Any) -> None:
        row = {
            "key": key,
            **{f: getattr(res, f) for f in ("consistency", "perplexity", "per_query", "tokens", "times", "samples")},
            "answers": res.answers,
        }
        self.rows[key] = row
        with locked(self.path.with_suffix(".lock")):
            with open(self.path, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def __call__(self, coefficients: Any, seed: int) -> Any:
        from dots.search.study.scorer import TrialResult

        key = self.key(coefficients, seed)
        if key not in self.rows:
            self._read()
        if key in self.rows:
            self.hits += 1
            row = self.rows[key]
            return TrialResult(
                **{f: row[f] for f in ("consistency", "perplexity", "per_query", "tokens", "times", "samples")},
                answers=row.get("answers"),
            )
        res = self.scorer(coefficients, seed)
        self.add(key, res)
        return res


def import_study(db: Path, memo: MemoScorer, seed: int, sources: list[str]) -> None:
    """Rows of a study scored before the memo existed."""
    import optuna
    from optuna.trial import TrialState

    from dots.search.study.scorer import TrialResult

    memo._read()
    for name in optuna.get_all_study_names(f"sqlite:///{db}"):
        study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            lam = {s: t.params[f"lambda_{s}"] for s in sources}
            key = memo.key(lam, seed + t.number)
            if key not in memo.rows:
                a = t.user_attrs
                memo.add(
                    key,
                    TrialResult(
                        t.values[0],
                        t.values[1],
                        a["per_query_consistency"],
                        a["tokens_generated"],
                        a["time"],
                        a["samples_drawn"],
                    ),
                )


def config_name(sampler: str, adaptive: bool) -> str:
    return f"{sampler}-{'adaptive' if adaptive else 'full'}"


def jobs(labs: Sequence[int], seeds: Sequence[int], trials_ref: int, trials_other: int) -> list[dict]:
    """In order of priority, so that an interrupted run holds the most useful part: the first
    seed of every lab and config, then tpe (full and adaptive) on the other seeds, then the
    other samplers on the other seeds; lab by lab within each seed."""
    out = []
    for seed in seeds:
        for lab in labs:
            for sampler in SAMPLERS:
                for adaptive in (False, True):
                    n = trials_ref if sampler == "tpe" else trials_other
                    out.append({"lab": lab, "seed": seed, "sampler": sampler, "adaptive": adaptive, "n_trials": n})
    first = seeds[0] if seeds else 0
    phase = lambda j: 0 if j["seed"] == first else 1 if j["sampler"] == "tpe" else 2  # noqa: E731
    return sorted(out, key=lambda j: (phase(j), j["seed"], j["lab"]))  # stable: sampler order kept


def study_dir(job: dict) -> Path:
    return out_root() / f"lab{job['lab']}" / config_name(job["sampler"], job["adaptive"]) / f"seed{job['seed']}"


def running_front(trials: list[dict]) -> list[list[int]]:
    """Trial numbers on the front of the first t trials, for t = 1..len(trials) (own currency)."""
    from dots.search.pick.pareto import Point, pareto_front

    pts, fronts = [], []
    for t in trials:
        pts.append(Point(t["number"], t["consistency"], t["perplexity"], t["params"]))
        fronts.append([p.number for p in pareto_front(pts)])
    return fronts


def run_job(lab: Lab, job: dict) -> dict:
    import optuna
    from optuna.trial import TrialState

    from dots.options.search import search_options
    from dots.options.study import study_options
    from dots.search.pick.pareto import Point, pareto_front, pick
    from dots.search.study.scorer import Scorer
    from dots.search.study.storage import open_storage, open_study
    from dots.search.study.trials import run_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = study_dir(job)
    out.mkdir(parents=True, exist_ok=True)
    cfg = search_cfg(
        job["lab"],
        lab.paths,
        [
            f"sampler={job['sampler']}",
            f"search.adaptive.enabled={str(job['adaptive']).lower()}",
            f"seed={job['seed']}",
            f"search.n_trials={job['n_trials']}",
            f"run_dir={out}",
        ],
    )
    sources = list(lab.tv.sources)
    names = [f"lambda_{s}" for s in sources]
    study = open_study(search_options(cfg), open_storage(None, out), "lab-samplers")
    mode = "adaptive" if job["adaptive"] else "full"
    scorer = MemoScorer(
        Scorer(lab.engine, lab.prompts, study_options(cfg.search), lab.tokenizer), lab.dir / f"memo-{mode}.jsonl"
    )
    began = time.perf_counter()
    run_study(study, scorer, sources, tuple(cfg.search.range), int(job["n_trials"]), int(cfg.seed))
    span = time.perf_counter() - began
    done = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    trials = [
        {
            "number": t.number,
            "params": {s: t.params[n] for s, n in zip(sources, names)},
            "consistency": t.values[0],
            "perplexity": t.values[1],
            "tokens": t.user_attrs.get("tokens_generated"),
            "samples": t.user_attrs.get("samples_drawn"),
            "seconds": (t.user_attrs.get("time") or {}).get("total"),
        }
        for t in done
    ]
    fronts = running_front(trials)
    if job["adaptive"]:  # the hypervolume's currency: every ever-front trial with all k samples
        full_cfg = search_cfg(job["lab"], lab.paths, [f"seed={job['seed']}"])
        full = MemoScorer(
            Scorer(lab.engine, lab.prompts, study_options(full_cfg.search), lab.tokenizer), lab.dir / "memo-full.jsonl"
        )
        ever = sorted({n for f in fronts for n in f})
        for t in trials:
            if t["number"] in ever:
                r = full(t["params"], seed=int(cfg.seed) + t["number"])
                t["consistency_full"], t["perplexity_full"] = r.consistency, r.perplexity
    picks = {}
    for n in sorted({min(25, len(trials)), len(trials)}):
        pts = [Point(t["number"], t["consistency"], t["perplexity"], t["params"]) for t in trials[:n]]
        chosen = pick(pareto_front(pts), str(cfg.pick))
        picks[str(n)] = {"trial": chosen.number, "params": dict(chosen.params)}
    result = {
        **job,
        "pick_rule": str(cfg.pick),
        "k": int(cfg.search.k),
        "n_queries": len(lab.prompts),
        "trials": trials,
        "fronts": fronts,
        "picks": picks,
        "study_seconds": span,
        "memo_hits": scorer.hits,
    }
    write_json(out / "result.json", result)
    return result
