"""`python -m dots.search`: the DoTS pipeline (Algorithm 1), resumable stage by stage.

task vectors (cached) → difficulty-aware selection (selection.jsonl) → Optuna TPE study
over λ ∈ [lo, hi]^K with ONE live engine whose weights are swapped per trial
(study.db) → pick from the Pareto front (result.yaml, trials.csv, pareto.png) → export
(model/, with a model card; optionally pushed to the Hub). Every stage writes into the
run directory and is skipped on rerun when its inputs have not changed.

The engine runs models of the output's shapes: the base, or, when a source adds
vocabulary rows, θ(0) with those rows, written once to `engine-init/` with the output's
config and tokenizer (see `engine_model`), so that every swap fits.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import hydra
import torch
import yaml
from omegaconf import DictConfig, OmegaConf

import dots.lab  # noqa: F401  (registers the ${lab:...} resolver)
from dots.align import Alignment, align, config_differences
from dots.answers import consistency as answer_consistency
from dots.checkpoint import Checkpoint
from dots.errors import DotsError, cli_errors
from dots.memory import reuse_freed_memory
from dots.parallel import RETRY_OF, exit_on_sigterm, recover_stale_trials, run_once_lock
from dots.pools import Query, load_pool
from dots.prompts import format_prompt
from dots.selection import (SelectionConfig, choose, load_selection, random_selection, save_selection,
                            score_difficulty, selection_key)
from dots.taskvec import SparsifyConfig, TaskVectors, build_task_vectors, fingerprint

log = logging.getLogger("dots.search")


# --- configuration helpers ----------------------------------------------------------------

def plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _hash(obj: Any, n: int = 10) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def check_range(bounds: Sequence[float]) -> tuple[float, float]:
    if len(bounds) != 2:
        raise DotsError(f"search.range must be [low, high], got {list(bounds)}")
    lo, hi = float(bounds[0]), float(bounds[1])
    if lo < 0 or hi < 0:
        raise DotsError(f"search.range must not be negative, got [{lo}, {hi}]")
    if hi <= lo:
        raise DotsError(f"search.range is inverted or empty: [{lo}, {hi}] (need low < high)")
    return lo, hi


def run_identity(cfg: DictConfig, base: Checkpoint, sources: Mapping[str, Checkpoint]) -> dict:
    """What a run's results depend on (the trial count excluded, so it can be raised later)."""
    search = {k: v for k, v in plain(cfg.search).items() if k not in ("n_trials", "storage", "workers", "worker", "heartbeat_s", "grace_s", "fixed")}
    return {
        "base": fingerprint(base), "sources": {k: fingerprint(v) for k, v in sources.items()},
        "sparsify": plain(cfg.sparsify), "selection": plain(cfg.selection), "pool": plain(cfg.pool),
        "search": search, "prompt": cfg.backbone.prompt, "seed": cfg.seed,
    }


def resolve_run_dir(cfg: DictConfig, identity: dict) -> Path:
    if cfg.run_dir:
        return Path(str(cfg.run_dir)).expanduser()
    return Path(os.environ.get("DOTS_OUTPUTS", "outputs")) / "search" / f"{cfg.backbone.name}-{_hash(identity, 8)}"


# --- the study ------------------------------------------------------------------------------

@dataclass
class TrialResult:
    consistency: float
    perplexity: float
    per_query: list[float]
    tokens: int
    times: dict[str, float]


class Scorer:
    """Evaluates one λ on the live engine: swap → generate k → consistency; prompt NLL → PPL."""

    def __init__(self, engine: Any, prompts: list[str], cfg: DictConfig, tokenizer: Any = None):
        self.engine = engine
        self.prompts = prompts
        self.k = int(cfg.search.k)
        self.temperature = float(cfg.search.temperature)
        self.top_p = float(cfg.search.top_p)
        self.max_tokens = int(cfg.search.max_tokens)
        self.mode = str(cfg.search.get("answer_mode", "math"))
        self.tokenizer = tokenizer

    def __call__(self, coefficients: Mapping[str, float], seed: int) -> TrialResult:
        start = getattr(self.engine, "start", None)  # a LazyEngine: its start is not the trial's swap
        engine_start = start() if callable(start) else 0.0
        t0 = time.perf_counter()
        self.engine.swap_coefficients(dict(coefficients))
        t1 = time.perf_counter()
        outs = self.engine.generate(self.prompts, n=self.k, temperature=self.temperature, top_p=self.top_p,
                                    max_tokens=self.max_tokens, seed=seed)
        t2 = time.perf_counter()
        per_query = [answer_consistency(samples, mode=self.mode) for samples in outs]
        t3 = time.perf_counter()
        nll = self.engine.prompt_nll(self.prompts)
        t4 = time.perf_counter()
        total_tokens = sum(x.tokens for x in nll)
        ppl = math.exp(sum(x.nll for x in nll) / max(total_tokens, 1))
        if self.tokenizer is not None:
            texts = [s for samples in outs for s in samples]
            tokens = sum(len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else 0
        else:
            tokens = sum(len(s) for samples in outs for s in samples)
        return TrialResult(
            sum(per_query) / len(per_query), ppl, per_query, tokens,
            {"swap": t1 - t0, "generate": t2 - t1, "consistency": t3 - t2, "perplexity": t4 - t3, "total": t4 - t0,
             "engine_start": engine_start},
        )


class LazyEngine:
    """Starts the engine on first use, so a finished run resumes without loading a model."""

    def __init__(self, factory: Any):
        self._factory = factory
        self._engine: Any = None

    def __getattr__(self, name: str) -> Any:
        self.start()
        return getattr(self._engine, name)

    def start(self) -> float:
        """Start the engine if it is not running; the seconds that took (0 when it was)."""
        if self._engine is not None:
            return 0.0
        began = time.perf_counter()
        self._engine = self._factory()
        return time.perf_counter() - began

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def open_storage(url: str | None, run_dir: Path) -> Any:
    """SQLite in the run dir by default; a `*.journal`/`*.log` path → journal file; else an RDB URL."""
    import optuna
    from optuna.storages import JournalStorage, RDBStorage

    if not url:
        url = f"sqlite:///{(run_dir / 'study.db').resolve()}"
    try:
        if url.endswith((".journal", ".log")) and "://" not in url:
            from optuna.storages.journal import JournalFileBackend

            Path(url).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(url))
        if url.startswith("sqlite"):
            return RDBStorage(url)
        return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:
        raise DotsError(f"cannot open the study storage {url!r}: {str(exc).splitlines()[0]}") from None


def run_study(study: Any, scorer: Scorer, sources: list[str], bounds: tuple[float, float], n_trials: int,
              seed: int, fixed: list[list[float]] | None = None, heartbeat_s: float = 30.0,
              grace_s: float = 120.0, poll_s: float = 2.0) -> None:
    """Ask/tell until the study holds n_trials complete trials (or the fixed points are scored).

    Safe with several workers on one storage: a worker never starts a trial beyond the
    target, waits while others run the last ones, and takes over a dead worker's trial
    once its heartbeat is older than `grace_s` (dots.parallel)."""
    from optuna.trial import TrialState

    from dots.parallel import Heartbeat, fail_and_requeue, recover_stale_trials, sigterm_deferred
    from dots.progress import progress_enabled

    names = [f"lambda_{s}" for s in sources]

    def count(*states: TrialState) -> int:
        return len(study.get_trials(deepcopy=False, states=states))

    if fixed is not None:
        def key(point: Any) -> tuple[float, ...]:
            return tuple(round(float(point[n]), 10) for n in names)

        done = {key(t.params) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        queued = {key(t.system_attrs["fixed_params"]) for t in study.get_trials(
            deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)) if "fixed_params" in t.system_attrs}
        todo = [dict(zip(names, map(float, p))) for p in fixed]
        todo = [p for p in todo if key(p) not in done]
        for point in todo:  # (not skip_if_exists: a FAILed trial of the point must not hide it)
            if key(point) not in queued:
                study.enqueue_trial(point)
                queued.add(key(point))
        target = count(TrialState.COMPLETE) + len(todo)
    else:
        target = n_trials
    start = count(TrialState.COMPLETE)
    if start >= target:
        log.info("study already has %d complete trials", start)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
               TimeRemainingColumn(), TextColumn("{task.fields[best]}"))
    with Progress(*columns, disable=not progress_enabled()) as bar:
        task = bar.add_task("trials", total=target, completed=start, best="")
        while True:
            recover_stale_trials(study, grace_s, names)
            complete = count(TrialState.COMPLETE)
            if complete >= target:
                break
            if complete + count(TrialState.RUNNING) >= target:  # others are running the last trials
                time.sleep(poll_s)
                continue
            trial = None
            try:
                with sigterm_deferred():  # a SIGTERM here lands after the suggestions, in the except
                    trial = study.ask()
                    if count(TrialState.COMPLETE) + count(TrialState.RUNNING) - 1 >= target:  # lost a race
                        study.tell(trial, state=TrialState.PRUNED)
                        trial = None
                        continue
                    lam = {s: trial.suggest_float(n, *bounds) for s, n in zip(sources, names)}
                with Heartbeat(study, trial._trial_id, heartbeat_s):
                    res = scorer(lam, seed=seed + trial.number)
            except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: the point is redone on resume
                if trial is not None:
                    with sigterm_deferred():
                        fail_and_requeue(study, trial._trial_id, names)
                raise
            except BaseException:
                if trial is not None:
                    study.tell(trial, state=TrialState.FAIL)
                raise
            with sigterm_deferred():
                for name, value in (("per_query_consistency", res.per_query), ("tokens_generated", res.tokens),
                                    ("time", res.times)):
                    trial.set_user_attr(name, value)
                study.tell(trial, [res.consistency, res.perplexity])
            finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            best = max(finished, key=lambda t: (t.values[0], -t.values[1]))
            bar.update(task, completed=len(finished),
                       best=f"best C={best.values[0]:.3f} ppl={best.values[1]:.3f} @ #{best.number}")
            log.info("trial %d: %s → C=%.4f PPL=%.4f (%.2fs)", trial.number,
                     ", ".join(f"{k}={v:.3f}" for k, v in lam.items()), res.consistency, res.perplexity,
                     res.times["total"])


# --- the engine's model ---------------------------------------------------------------------

ENGINE_MODEL = "engine-init"


def engine_model(cfg: DictConfig, alignment: Alignment, tv: TaskVectors, run_dir: Path) -> Path:
    """The model directory the search's engine starts on: the base, unless a source adds
    vocabulary rows. Then θ(λ) has more embedding / lm_head rows than the base, so the engine
    starts on θ(0) — the base plus the added rows, with the output's config (config_from,
    vocab_size adjusted) and tokenizer, as `dots.export` writes it — in <run_dir>/engine-init,
    written once and reused while its inputs are unchanged (workers on one run share it)."""
    if not alignment.extra_rows:
        return alignment.base.path
    from dots.export import MARKER, write_synthesized

    out = run_dir / ENGINE_MODEL
    zeros = {k: 0.0 for k in tv.sources}
    config_from = str(cfg.backbone.get("config_from", "base"))
    aux = alignment.tokenizer_source()
    key = _hash({
        "base": fingerprint(alignment.base), "sources": {k: fingerprint(v) for k, v in alignment.sources.items()},
        "extra_rows": alignment.extra_rows, "config_from": config_from,
        "tokenizer": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in aux.aux_files()],
    })
    with run_once_lock(run_dir / f".{ENGINE_MODEL}.lock"):
        try:
            valid = json.loads((out / MARKER).read_text()) == {"coefficients": zeros, "key": key}
        except (OSError, ValueError):
            valid = False
        if not valid:
            card = (f"# θ(0) of {cfg.backbone.name}\n\nThe base with the vocabulary rows that source "
                    f"{', '.join(sorted(set(alignment.extra_rows.values())))} added: the model the search's "
                    "engine starts on (the output's shapes, config and tokenizer). Not a result.\n")
            write_synthesized(out, tv, alignment, zeros, alignment.output_config(config_from), card,
                              device="cpu", marker={"key": key})
            log.info("engine model: wrote %s (the base + %s's added vocabulary rows)", out,
                     ", ".join(sorted(set(alignment.extra_rows.values()))))
    return out


def padded_source(alignment: Alignment, tv: TaskVectors, key: str):
    """Source `key`'s tensors in the base's naming, each embedding / lm_head with fewer rows
    than the output completed with the output's added rows (those every θ(λ) carries)."""
    ckpt = alignment.sources[key]
    for name in alignment.base.names:
        tensor = ckpt.get(alignment.source_name(key, name))
        if name in alignment.extra_rows and tensor.shape[0] < alignment.out_plan[name].shape[0]:
            extra = tv.extra_rows(name)
            if extra is None:
                raise DotsError(f"the task-vector cache lacks the added rows of {name}: stale cache?")
            have = tensor.shape[0] - alignment.base.info(name).shape[0]
            dtype = torch.promote_types(tensor.dtype, extra.dtype)
            tensor = torch.cat([tensor.to(dtype), extra[have:].to(dtype)])
        yield name, tensor


def swap_original(engine: Any, alignment: Alignment, tv: TaskVectors, key: str) -> None:
    """Swap source `key` itself into the engine (selection.source=original). With added
    vocabulary the engine has the output's shapes: a source with as many rows is swapped
    as saved; one with fewer (a source that added no tokens) gets the output's added rows,
    i.e. it is scored with the output's vocabulary. The engine's own swap_checkpoint stays
    strict and rejects a checkpoint of other shapes (DotsError); the base is never swapped."""
    ckpt = alignment.sources[key]
    if all(alignment.source_name(key, n) in ckpt
           and ckpt.info(alignment.source_name(key, n)).shape == alignment.out_plan[n].shape
           for n in alignment.extra_rows):
        engine.swap_checkpoint(ckpt.path)
    else:
        engine.swap_weights(padded_source(alignment, tv, key))


# --- the pipeline ---------------------------------------------------------------------------

def _activation(engine: Any, cfg: SelectionConfig, alignment: Alignment, tv: TaskVectors) -> dict:
    if cfg.source == "original":
        return {s: (lambda s=s: swap_original(engine, alignment, tv, s)) for s in alignment.sources}
    names = list(tv.sources)
    return {s: (lambda s=s: engine.swap_coefficients({t: float(t == s) for t in names})) for s in alignment.sources}


def select(cfg: DictConfig, engine: Any, queries: list[Query], prompts: dict[str, str],
           alignment: Alignment, tv: TaskVectors, identity: dict, run_dir: Path) -> list[Query]:
    sel_cfg = SelectionConfig(**plain(cfg.selection))
    key = selection_key({k: identity[k] for k in ("base", "sources", "selection", "pool", "prompt", "sparsify")})
    path = run_dir / "selection.jsonl"
    saved = load_selection(path, key)
    if saved is not None:
        log.info("selection: reusing %s (%d queries)", path, len(saved.queries))
        return saved.queries
    if sel_cfg.strategy == "random":
        selection = random_selection(queries, sel_cfg)
    else:
        per_source = score_difficulty(queries, prompts, _activation(engine, sel_cfg, alignment, tv),
                                      engine.generate, sel_cfg, run_dir / f"difficulty-{key}.jsonl",
                                      mode=str(cfg.search.get("answer_mode", "math")))
        selection = choose(queries, per_source, sel_cfg)
    save_selection(selection, path, key)
    return selection.queries


def trial_rows(study: Any, sources: list[str]) -> list[dict]:
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        times = t.user_attrs.get("time", {})
        row = {"number": t.number, "state": t.state.name}
        row.update({f"lambda_{s}": t.params.get(f"lambda_{s}") for s in sources})
        ok = t.state == TrialState.COMPLETE
        row.update({"consistency": t.values[0] if ok else None, "perplexity": t.values[1] if ok else None,
                    "tokens_generated": t.user_attrs.get("tokens_generated")})
        row.update({f"time_{k}": round(v, 4) for k, v in times.items()})
        rows.append(row)
    return rows


def pick_and_report(study: Any, sources: list[str], rule: str, run_dir: Path, title: str) -> dict:
    from optuna.trial import TrialState

    from dots.pareto import Point, pareto_front, pick, plot_front, write_trials_csv

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    points = [Point(t.number, t.values[0], t.values[1], {s: t.params[f"lambda_{s}"] for s in sources}) for t in trials]
    front = pareto_front(points)
    chosen = pick(front, rule)
    write_trials_csv(trial_rows(study, sources), run_dir / "trials.csv")
    plot_front(points, front, chosen, run_dir / "pareto.png", title)
    result = {
        "trial": chosen.number, "pick": rule,
        "coefficients": {s: float(v) for s, v in chosen.params.items()},
        "objectives": {"consistency": chosen.consistency, "perplexity": chosen.perplexity},
        "front": [{"trial": p.number, "consistency": p.consistency, "perplexity": p.perplexity,
                   "coefficients": dict(p.params)} for p in front],
        "complete_trials": len(points),
    }
    (run_dir / "result.yaml").write_text(yaml.safe_dump(result, sort_keys=False))
    return result


def run_search(cfg: DictConfig) -> Path:
    """The whole pipeline; returns the run directory."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bounds = check_range(list(cfg.search.range))
    if int(cfg.search.n_trials) < 1:
        raise DotsError(f"search.n_trials must be >= 1, got {cfg.search.n_trials}")
    backbone = cfg.backbone
    base = Checkpoint(str(backbone.base), backbone.get("revision"))
    sources = {str(k): Checkpoint(str(v), backbone.get("revision")) for k, v in backbone.sources.items()}
    alignment = align(base, sources)
    for field_name, values in config_differences(base, sources).items():
        log.warning("config field %s differs: %s (the output takes config_from=%s)", field_name, values,
                    backbone.get("config_from", "base"))
    identity = run_identity(cfg, base, sources)
    run_dir = resolve_run_dir(cfg, identity)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print(f"run directory: {run_dir}")

    # 1. task vectors
    tv = build_task_vectors(base, sources, SparsifyConfig(**plain(cfg.sparsify)),
                            cfg.get("cache_dir") or None, alignment=alignment)
    names = tv.sources
    fixed = cfg.search.fixed
    fixed_points = [list(map(float, p)) for p in fixed] if fixed else None
    if fixed_points and any(len(p) != len(names) for p in fixed_points):
        raise DotsError(f"search.fixed points need {len(names)} coefficients ({', '.join(names)}) each")
    if fixed_points and any(not bounds[0] <= x <= bounds[1] for p in fixed_points for x in p):
        raise DotsError(f"search.fixed coefficients must lie in search.range {list(bounds)}")
    # 2. pool + selection (the engine starts only if some stage needs it)
    queries = load_pool(cfg.pool)
    from transformers import AutoTokenizer

    from dots.engines.factory import build_engine

    tokenizer = AutoTokenizer.from_pretrained(str(alignment.tokenizer_source().path))  # the output's (and engine's)
    prompts = {q.id: format_prompt(q.question, backbone.prompt, tokenizer) for q in queries}
    engine = LazyEngine(lambda: build_engine(cfg.engine, engine_model(cfg, alignment, tv, run_dir), tv))
    try:
        with run_once_lock(run_dir / ".selection.lock"):  # other workers wait, then reuse it
            chosen = select(cfg, engine, queries, prompts, alignment, tv, identity, run_dir)
        # 3. study
        storage = open_storage(cfg.search.storage, run_dir)
        study_name = cfg.search.study_name or f"dots-{_hash(identity, 12)}" + ("-fixed" if fixed else "")
        sampler = optuna.samplers.TPESampler(seed=int(cfg.seed) + 7919 * int(cfg.search.worker), n_startup_trials=int(cfg.search.n_startup_trials),
                                             multivariate=bool(cfg.search.multivariate),
                                             constant_liar=int(cfg.search.workers) > 1)
        study = optuna.create_study(study_name=study_name, storage=storage, sampler=sampler,
                                    directions=["maximize", "minimize"], load_if_exists=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["consistency", "perplexity"])
        if int(cfg.search.workers) <= 1:  # alone on this study: whatever is RUNNING was interrupted
            stale = recover_stale_trials(study, grace_s=-1.0, names=[f"lambda_{n}" for n in names])
            if stale:
                print(f"study: trial(s) {stale} left running by an interrupted run were marked failed and queued again")
        scorer = Scorer(engine, [prompts[q.id] for q in chosen], cfg, tokenizer)
        run_study(study, scorer, names, bounds, int(cfg.search.n_trials), int(cfg.seed), fixed_points,
                  heartbeat_s=float(cfg.search.heartbeat_s), grace_s=float(cfg.search.grace_s))
    finally:
        engine.close()
    if fixed_points:
        from dots.pareto import write_trials_csv

        write_trials_csv(trial_rows(study, names), run_dir / "fixed.csv")
        print(f"scored {len(fixed_points)} fixed coefficient set(s): {run_dir / 'fixed.csv'}")
        return run_dir
    with run_once_lock(run_dir / ".finalize.lock"):  # several workers: pick and export happen once
        return finalize(cfg, study, names, tv, alignment, run_dir, len(chosen))


def finalize(cfg: DictConfig, study: Any, names: list[str], tv: TaskVectors, alignment: Any, run_dir: Path,
             selection_size: int) -> Path:
    """Pick from the Pareto front, write the reports, export the model (skipped when done)."""
    backbone = cfg.backbone
    # 4. pick
    result = pick_and_report(study, names, str(cfg.pick), run_dir, f"DoTS on {backbone.name}")
    print(f"pick ({cfg.pick}): trial {result['trial']} λ={result['coefficients']} "
          f"C={result['objectives']['consistency']:.4f} PPL={result['objectives']['perplexity']:.4f}")
    # 5. export
    if cfg.export.enabled:
        from dots.export import export_model

        export_model(cfg, tv, alignment, result, run_dir, selection_size=selection_size)
    return run_dir


@hydra.main(config_path="../conf", config_name="search", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    logging.getLogger("dots").setLevel(logging.INFO)
    reuse_freed_memory()
    exit_on_sigterm()
    run_search(cfg)


if __name__ == "__main__":
    main()
