"""Samplers × adaptive sampling on several labs, against the labs' ground truth (#20 part 4).

For each lab (a trio built by `python -m dots.lab seed=L`), each sampler of the registry
(tpe, gp, nsga2, random) with and without adaptive sampling, and each search seed, this runs
dots' own study — `dots.search.study.storage.open_study` / `dots.search.study.trials.run_study`,
the sampler registry, the `Scorer` (consistency of k samples per query, adaptive rounds, perplexity of the prompts) and
the pick of `dots.search.pick.pareto` — on the lab's difficulty-aware selection (dots'
`build_selection`, one per lab, `selection.seed` 0, n = 64). What differs from
`python -m dots.search backbone=lab`: the engine. Trials generate with the lab's KV-cached
batched sampler (`dots.lab.sampling.LocalEngine`) into which θ0 + Σλτ̃ is swapped by dots'
`ResidentSynthesizer`, instead of transformers' `generate` (~35–48 s per trial on the loaded
2-core machine against ~2.5 s here). Sampling draws differ from the HF engine's (another
sampler and RNG), the scoring code is the same.

    python benchmarks/lab_samplers.py run &   # the studies (resumable; several processes
    python benchmarks/lab_samplers.py run &   #  share the jobs, one per core)
    python benchmarks/lab_samplers.py report                         # ground truth, tables, figures

Results go to outputs/bench/lab_samplers/ (per study: study.db and result.json, written
when the study ends; a killed run resumes from its study.db). `report` scores the picks, the
sources, a 5×5 grid of fixed λ and the classic merges on the lab's test split (greedy,
`--test-size` problems, half per skill; cached in gt.json per lab), writes
results.md / results.json and one figure per lab (hypervolume against trials and tokens).

Hypervolume: the 2-objective front (consistency ↑, perplexity ↓) of the trials so far, against
a reference point fixed per lab: the worse of the two source checkpoints on each objective
(min C, max PPL), both scored by the same scorer (k = 8, no adaptive sampling, seed 0) on the
lab's selection. The area counts only merges that beat the worse source on both objectives.
Adaptive sampling's consistency is measured on fewer samples and is biased upward (a query
stops early when its first answers agree), so for the hypervolume of an adaptive study every
trial that was ever on its running front is scored again with all k samples (same λ, the trial's
seed); the front itself is the one the search saw. Those re-scores are analysis, not search:
their tokens are not counted.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLERS = ("tpe", "gp", "nsga2", "random")
METHODS = {  # the classic merges of benchmarks/lab_methods.sh, defaults of conf/method/*.yaml
    "task_arithmetic": ["method=task_arithmetic"],
    "ties": ["method=ties"],
    "dare_ties": ["method=dare_ties"],
    "ram_plus": ["method=ram_plus"],
    "sar": ["method=sar"],
}
GRID = (0.0, 0.5, 1.0, 1.5, 2.0)
log = logging.getLogger("lab_samplers")


def out_root() -> Path:
    return Path(os.environ.get("DOTS_OUTPUTS") or ROOT / "outputs") / "bench" / "lab_samplers"


# --- labs ----------------------------------------------------------------------------------


LAB_OVERRIDES: dict[int, list[str]] = {}  # --lab-overrides 2:threads=1 → extra conf/lab.yaml keys of a lab


def parse_lab_overrides(items: Sequence[str]) -> None:
    for item in items:
        lab, _, rest = item.partition(":")
        LAB_OVERRIDES[int(lab)] = [x for x in rest.split(",") if x]


def lab_paths(lab: int, build: bool = False) -> dict[str, Path] | None:
    """The trio of `python -m dots.lab seed=<lab>` (the shipped one for seed 0), or None when it
    is not built yet (build=True: build it now)."""
    from dots.lab.build import ensure_trio
    from dots.lab.config import STAGES, load_config, shipped_dir, stage_dir

    overrides = [f"seed={lab}", *LAB_OVERRIDES.get(lab, [])]
    if build:
        return ensure_trio(overrides)
    cfg = load_config(overrides)
    paths = {}
    for stage in STAGES:
        path = shipped_dir(cfg, stage) or stage_dir(cfg, stage)
        if not path.is_dir():
            return None
        paths[stage] = path
    return paths


def search_cfg(lab: int, paths: dict[str, Path], extra: Sequence[str] = ()) -> Any:
    """conf/search.yaml with backbone=lab pointed at this lab's trio (and `extra` overrides)."""
    from dots.options.compose import compose

    return compose(
        "search",
        [
            "backbone=lab",
            "engine=hf",
            f"backbone.base={paths['base']}",
            f"backbone.sources.sft={paths['sft']}",
            f"backbone.sources.rlvr={paths['rlvr']}",
            "export.enabled=false",
            "search.range=[0.0,2.0]",  # the space these studies searched (the default became [0.5, 2.0] after them)
            *extra,
        ],
    )


class LabEngine:
    """The Engine protocol over the lab's fast sampler: `LocalEngine` (KV-cached batched
    sampling of a lab-sized model) with θ0 + Σλτ̃ swapped in by dots' ResidentSynthesizer.
    `prompt_nll` batches prompts of equal length (the lab's are all 6 characters) and
    computes what LocalEngine.prompt_nll computes one prompt at a time."""

    def __init__(self, model: Path, task_vectors: Any):
        import torch

        from dots.lab.sampling import LocalEngine
        from dots.vectors.synth import ResidentSynthesizer

        self.local = LocalEngine(model)
        self.synth = ResidentSynthesizer(task_vectors, device=torch.device("cpu"))
        self.tok = self.local.tok

    def generate(self, prompts, n=1, temperature=0.0, top_p=1.0, max_tokens=256, seed=None):
        return self.local.generate(prompts, n, temperature, top_p, max_tokens, seed)

    def prompt_nll(self, texts: Sequence[str]) -> list:
        import torch

        from dots.lab.sampling import encode
        from dots.scoring.perplexity import PromptNLL

        ids = encode(self.tok, texts)
        out: list = [None] * len(ids)
        by_len: dict[int, list[int]] = {}
        for i, x in enumerate(ids):
            by_len.setdefault(len(x), []).append(i)
        with torch.no_grad():
            for length, rows in by_len.items():
                x = torch.tensor([ids[i] for i in rows])
                logp = torch.log_softmax(self.local.model(input_ids=x).logits[:, :-1].float(), -1)
                nll = -logp.gather(-1, x[:, 1:, None]).squeeze(-1).sum(-1)
                for r, i in enumerate(rows):
                    out[i] = PromptNLL(nll=float(nll[r]), tokens=length - 1)
        return out

    def swap_weights(self, weights) -> None:
        self.local.swap_weights(weights)

    def swap_checkpoint(self, path) -> None:
        self.local.swap_checkpoint(path)

    def swap_coefficients(self, coefficients) -> None:
        self.local.swap_weights(self.synth(coefficients))

    def close(self) -> None:  # one engine serves every study of a worker
        pass


class AsLoaded:
    """An engine whose swap_coefficients keeps the weights it holds (to score a checkpoint)."""

    def __init__(self, engine: Any):
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def swap_coefficients(self, coefficients: Any) -> None:
        pass


class Lab:
    """One lab's inputs for every study: τ̃, the selection (prompts), the engine, the reference point."""

    def __init__(self, lab: int):
        from transformers import AutoTokenizer

        from dots.io.problems import load_pool
        from dots.scoring.prompts import format_prompt
        from dots.search.pipeline import prepare
        from dots.search.steps import build_selection, build_vectors, load_selected

        self.lab = lab
        self.dir = out_root() / f"lab{lab}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.paths = lab_paths(lab, build=True)
        cfg = search_cfg(lab, self.paths, [f"run_dir={self.dir / 'selection'}", "seed=0"])
        run = prepare(cfg)
        run.run_dir.mkdir(parents=True, exist_ok=True)
        run.results.task_vectors = self.tv = build_vectors(run)
        run.queries = load_pool(cfg.pool)
        self.tokenizer = run.tokenizer = AutoTokenizer.from_pretrained(str(self.paths["base"]))
        run.prompts = {q.id: format_prompt(q.question, cfg.backbone.prompt, run.tokenizer) for q in run.queries}
        self.engine = run.engine = LabEngine(self.paths["base"], self.tv)
        with locked(self.dir / ".selection.lock"):
            chosen = load_selected(run) if (run.run_dir / "selection.jsonl").exists() else build_selection(run)
        self.prompts = [run.prompts[q.id] for q in chosen]
        self.ids = [q.id for q in chosen]  # the selected queries, in the order of a trial's answers
        self.record = next(run.run_dir.glob("difficulty-*.jsonl"), None)  # the sources' answers (selection)
        self.reference = self._reference(cfg)

    def _reference(self, cfg: Any) -> dict:
        """C and PPL of base, SFT and RLVR themselves under the full-k scorer, seed 0 (cached)."""
        from dots.options.study import study_options
        from dots.search.study.scorer import Scorer

        path = self.dir / "reference.json"
        if path.exists():
            return json.loads(path.read_text())
        scorer = Scorer(self.engine, self.prompts, study_options(cfg.search), self.tokenizer)
        ref = {}
        for stage, model in self.paths.items():
            self.engine.swap_checkpoint(model)
            scorer.engine = AsLoaded(self.engine)
            r = scorer({s: 0.0 for s in self.tv.sources}, seed=0)
            ref[stage] = {"consistency": r.consistency, "perplexity": r.perplexity, "tokens": r.tokens}
        write_json(path, ref)
        return ref


# --- studies -------------------------------------------------------------------------------


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
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill
                    continue
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


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def try_lock(path: Path) -> Any:
    fh = open(path, "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def claim(jobs: Sequence[dict], directory: Any) -> tuple[dict | None, Any]:
    """The first of `jobs` no other process holds and none has finished (its `directory(job)`
    has no result.json), with the file lock that holds it; (None, None) when there is none."""
    for job in jobs:
        directory(job).mkdir(parents=True, exist_ok=True)
        lock = try_lock(directory(job) / ".claim.lock")
        if lock is not None and (directory(job) / "result.json").exists():  # finished meanwhile
            lock.close()
            lock = None
        if lock is not None:
            return job, lock
    return None, None


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


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    todo = jobs(args.labs, args.seeds, args.trials_ref, args.trials_other)
    labs: dict[int, Lab] = {}
    while True:  # any number of these processes share the jobs: each claims one by a file lock
        pending = [j for j in todo if not (study_dir(j) / "result.json").exists()]
        if not pending:
            break
        ready = [j for j in pending if j["lab"] in labs or lab_paths(j["lab"]) is not None]
        job, lock = claim(ready, study_dir)
        if job is None:
            log.info("nothing to claim (labs being built or studies held by other workers); waiting")
            time.sleep(20)
            continue
        try:
            if job["lab"] not in labs:
                labs[job["lab"]] = lab = Lab(job["lab"])
                for done in sorted(lab.dir.glob("*/seed*/result.json")):  # studies scored before the memo
                    mode = done.parent.parent.name.split("-")[1]
                    memo = MemoScorer(None, lab.dir / f"memo-{mode}.jsonl")
                    import_study(done.parent / "study.db", memo, int(done.parent.name[4:]), list(lab.tv.sources))
            t0 = time.perf_counter()
            res = run_job(labs[job["lab"]], job)
            log.info(
                "lab %d %s seed %d: %d trials in %.0f s",
                job["lab"],
                config_name(job["sampler"], job["adaptive"]),
                job["seed"],
                len(res["trials"]),
                time.perf_counter() - t0,
            )
        finally:
            lock.close()


# --- report --------------------------------------------------------------------------------


def hypervolume(points: Sequence[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Area dominated by (C, PPL) points (C maximised, PPL minimised) inside the box they
    share with the reference point (C_r, PPL_r): a sweep in order of increasing PPL."""
    c_ref, p_ref = ref
    pts = sorted((p, c) for c, p in points if c > c_ref and p < p_ref)
    area, best_c = 0.0, c_ref
    for i, (p, c) in enumerate(pts):
        best_c = max(best_c, c)
        nxt = pts[i + 1][0] if i + 1 < len(pts) else p_ref
        area += (best_c - c_ref) * (nxt - p)
    return area


def hv_curve(res: dict, ref: tuple[float, float]) -> list[float]:
    """Hypervolume of the search's running front after each trial, in full-k currency."""
    by_number = {t["number"]: t for t in res["trials"]}
    curve = []
    for front in res["fronts"]:
        pts = [
            (by_number[n].get("consistency_full", by_number[n]["consistency"]), by_number[n]["perplexity"])
            for n in front
        ]
        curve.append(hypervolume(pts, ref))
    return curve


class GroundTruth:
    """Greedy accuracy on the lab's test split, cached in gt.json per lab."""

    def __init__(self, lab: int, size: int):
        import torch

        from dots.lab.sampling import LocalEngine
        from dots.lab.tasks import test_problems
        from dots.search.pipeline import prepare
        from dots.search.steps import build_vectors
        from dots.vectors.synth import ResidentSynthesizer

        self.lab, self.size = lab, size
        self.paths = lab_paths(lab)
        self.path = out_root() / f"lab{lab}" / f"gt-{size}.json"
        self.cache = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.problems = test_problems({"size": size})
        cfg = search_cfg(lab, self.paths, [f"run_dir={out_root() / f'lab{lab}' / 'selection'}"])
        self.tv = build_vectors(prepare(cfg))
        self.engine = LocalEngine(self.paths["base"])
        self.synth = ResidentSynthesizer(self.tv, device=torch.device("cpu"))

    def _score(self, key: str, load) -> dict:
        from dots.lab.score import accuracy

        if key not in self.cache:
            load()
            r = accuracy(self.engine, self.problems, n=1, temperature=0.0, max_tokens=32)
            self.cache[key] = {k: r[k] for k in ("all", "add", "sub")}
            write_json(self.path, self.cache)
        return self.cache[key]

    def merge(self, params: dict) -> dict:
        key = "lambda:" + ",".join(f"{s}={params[s]:.10f}" for s in self.tv.sources)
        return self._score(key, lambda: self.engine.swap_weights(self.synth(params)))

    def checkpoint(self, name: str, path: Path) -> dict:
        return self._score(f"model:{name}", lambda: self.engine.swap_checkpoint(path))


def classic_merges(lab: int, paths: dict[str, Path]) -> dict[str, Path]:
    from dots.merge.__main__ import run_from_config
    from dots.options.compose import compose

    out = {}
    for name, overrides in METHODS.items():
        dest = out_root() / f"lab{lab}" / "merged" / name
        if not (dest / "config.json").exists():
            cfg = compose(
                "merge",
                [
                    *overrides,
                    f"backbone.base={paths['base']}",
                    f"backbone.sources.sft={paths['sft']}",
                    f"backbone.sources.rlvr={paths['rlvr']}",
                    f"output={dest}",
                    "overwrite=true",
                    "device=cpu",
                ],
            )
            run_from_config(cfg)
        out[name] = dest
    return out


def fallbacks(result_path: Path) -> int:
    """Complete trials of a study whose point was the random fallback of dots.search.study.trials (a
    sampler that kept proposing scored points): enqueued trials, in a study that enqueues nothing else."""
    import optuna
    from optuna.trial import TrialState

    study = optuna.load_study(study_name="lab-samplers", storage=f"sqlite:///{result_path.parent / 'study.db'}")
    return sum(
        "fixed_params" in t.system_attrs for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    )


def first_reach(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v >= target - 1e-15), None)


def spread(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """median [min–max] over seeds."""
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


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
                f"{spread(gt_25)} | {spread(gt_final)} | {beats}/{len(gt_final)} | "
                f"{spread([r['fallbacks'] for r in runs], '{:.0f}')} |"
            )
        summary["labs"][str(lab)] = lab_json
        merge_list = ", ".join(f"{m} {v['all']:.3f}" for m, v in merges.items())
        md += [
            f"### Lab seed={lab}",
            "",
            f"Reference point (worse source on each objective): C = {ref[0]:.4f}, PPL = {ref[1]:.3f}; "
            f"target = 95% of the mean 50-trial hypervolume of tpe-full = {target:.4f}"
            if target is not None
            else f"Reference point: C = {ref[0]:.4f}, PPL = {ref[1]:.3f}; no 50-trial tpe-full run yet",
            "",
            f"Ground truth (greedy, {len(gt.problems)} test problems, A∪B): base {models['base']['all']:.3f}, "
            f"SFT {models['sft']['all']:.3f}, RLVR {models['rlvr']['all']:.3f}; best grid λ = {best_grid} "
            f"{grid[best_grid]['all']:.3f}; best classic merge {best_merge} {merges[best_merge]['all']:.3f} "
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
                f"| {sampler}-adaptive | {spread(own)} | {spread(gts)} | "
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
            f"{spread(gain, '{:+.3f}')} | {sum(g > 0 for g in gain)}/{len(gain)} | "
            f"{spread(paired_25, '{:+.3f}') if paired_25 else '—'} | "
            f"{spread(paired_end, '{:+.3f}') if paired_end else '—'} |"
        )
    return [
        "### All labs",
        "",
        "Medians [min–max] over every (lab, search seed) run. Target: 95% of the mean hypervolume of "
        "tpe-full after 50 trials on the same lab. Accuracy: greedy, A∪B, the pick of the search's "
        "own rule (max consistency on the front) after its last trial; 'vs tpe-full' pairs runs of "
        "the same lab and seed.",
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


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("dots.search").setLevel(logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the studies (resumable)")
    r.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--trials-ref", type=int, default=50, help="trials of the tpe studies (the reference)")
    r.add_argument("--trials-other", type=int, default=25, help="trials of the gp / nsga2 / random studies")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--lab-overrides", nargs="*", default=[], help="LAB:key=value,... e.g. 2:threads=1")
    q = sub.add_parser("report", help="ground truth, tables and figures from the finished studies")
    q.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2])
    q.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--lab-overrides", nargs="*", default=[], help="LAB:key=value,... e.g. 2:threads=1")
    args = p.parse_args(argv)
    parse_lab_overrides(args.lab_overrides)
    {"run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
