"""The DoTS pipeline (Algorithm 1) as a list of stages, resumable stage by stage.

task vectors (cached) → difficulty-aware selection (selection.jsonl) → Optuna study over
λ ∈ [lo, hi]^K (or [lo, hi]^4K with search.granularity=module: one λ per source and module
group, dots.search.granularity) with ONE live engine whose weights are swapped per trial (study.db) →
pick from the Pareto front (result.yaml, trials.csv, pareto.png) → export (model/, with
a model card) → push to the Hub (when asked). `dots.search.stages` skips a stage whose
inputs are unchanged, so rerunning a command resumes where it stopped; the engine starts
only when a stage needs it, so a finished run re-reports in seconds.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

import dots.config  # noqa: F401  (registers the ${dots_data:...} and ${lab:...} resolvers)
from dots.errors import DotsError
from dots.io.align import Alignment, align, config_differences
from dots.io.checkpoint import Checkpoint
from dots.io.problems import Query, load_pool
from dots.keys import stable_hash
from dots.paths import check_creatable
from dots.plain import to_plain
from dots.plan.decide import MemoryPlan
from dots.runtime.locks import held_by_one
from dots.search.dashboard import dashboard_command
from dots.search.engine_model import engine_model, source_activation
from dots.search.granularity import DEFAULT_GRANULARITY, fixed_point, param_names
from dots.search.identity import check_range, resolve_run_dir, run_identity
from dots.search.options import check_search_config
from dots.search.scorer import LazyEngine, Scorer
from dots.search.selection import (
    DamagedSelection,
    SelectionConfig,
    choose,
    load_selection,
    random_selection,
    save_selection,
    score_difficulty,
)
from dots.search.stages import Stage, run_stages
from dots.vectors.cache import TaskVectors, build_task_vectors
from dots.vectors.coefficients import format_coefficients
from dots.vectors.sparsify import SparsifyConfig

log = logging.getLogger("dots.search")


@dataclass
class Run:
    """What the stages of one search share: its config, inputs and the live engine."""

    cfg: DictConfig
    run_dir: Path
    alignment: Alignment
    identity: dict
    bounds: tuple[float, float]
    fixed: list[list[float]] | None  # each point as the values of `param_names`
    granularity: str = DEFAULT_GRANULARITY
    queries: list[Query] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    tokenizer: Any = None
    engine: Any = None
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def task_vectors(self) -> TaskVectors:
        return self.results["task_vectors"]

    @property
    def sources(self) -> list[str]:
        return self.task_vectors.sources

    @property
    def param_names(self) -> list[str]:
        """The study's Optuna parameters (`lambda_<source>[_<group>]`)."""
        return param_names(self.sources, self.granularity)


# --- the stages -------------------------------------------------------------------------


def build_vectors(run: Run) -> TaskVectors:
    """τ̃_i for every source (the cache shared by runs skips what is built)."""
    al = run.alignment
    return build_task_vectors(
        al.base,
        al.sources,
        SparsifyConfig(**to_plain(run.cfg.sparsify)),
        run.cfg.get("cache_dir") or None,
        alignment=al,
    )


def selection_inputs(run: Run) -> dict:
    inputs = {k: run.identity[k] for k in ("base", "sources", "selection", "pool", "prompt", "sparsify")}
    rule = str(run.cfg.search.get("consistency", "majority"))
    return inputs if rule == "majority" else {**inputs, "consistency": rule}  # earlier keys kept


def build_selection(run: Run) -> list[Query]:
    """SPEC §3: difficulty of every pool query under each source, then a balanced draw."""
    cfg = SelectionConfig(**to_plain(run.cfg.selection))
    key = stable_hash(selection_inputs(run))
    if cfg.strategy == "random":
        selection = random_selection(run.queries, cfg)
    else:
        activate = source_activation(run.engine, cfg.source, run.alignment, run.task_vectors)
        per_source = score_difficulty(
            run.queries,
            run.prompts,
            activate,
            run.engine.generate,
            cfg,
            run.run_dir / f"difficulty-{key}.jsonl",
            mode=str(run.cfg.search.get("answer_mode", "math")),
            rule=str(run.cfg.search.get("consistency", "majority")),
        )
        selection = choose(run.queries, per_source, cfg)
    save_selection(selection, run.run_dir / "selection.jsonl", key)
    return selection.queries


def load_selected(run: Run) -> list[Query]:
    path = run.run_dir / "selection.jsonl"
    try:
        saved = load_selection(path, stable_hash(selection_inputs(run)))
    except DamagedSelection as damage:
        return reselect(run, damage)
    if saved is None:
        raise DotsError(f"{path} does not match this run's inputs; delete it to select again")
    log.info("selection: reusing %s (%d queries)", path, len(saved.queries))
    return saved.queries


def reselect(run: Run, damage: DamagedSelection) -> list[Query]:
    """Select again in place of a damaged selection.jsonl (the difficulty record makes the same
    draw without sampling again); safe only if it chose the queries the study was scored on,
    which the rows before the damage show."""
    log.warning("%s; selecting again (the recorded difficulties are reused)", damage)
    queries = build_selection(run)
    if not set(damage.intact_ids) <= {q.id for q in queries}:
        raise DotsError(
            f"{damage}, and selecting again chose other queries than the study was scored on: restore it "
            "from a copy, or move study.db away to start the study again"
        )
    return queries


def study_name(run: Run) -> str:
    return run.cfg.search.study_name or f"dots-{stable_hash(run.identity, 12)}" + ("-fixed" if run.fixed else "")


def run_trials(run: Run) -> Any:
    """SPEC §4: the study, extended until it holds search.n_trials complete trials."""
    import optuna

    from dots.search.study import open_storage, open_study, run_study
    from dots.search.workers import recover_stale_trials

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg, names = run.cfg, run.sources
    study = open_study(cfg, open_storage(cfg.search.storage, run.run_dir), study_name(run))
    if int(cfg.search.workers) <= 1:  # alone on this study: whatever is RUNNING was interrupted
        recover_stale_trials(study, -1.0, run.param_names, left_by="an interrupted run")
    chosen = run.results["selection"]
    scorer = Scorer(run.engine, [run.prompts[q.id] for q in chosen], cfg, run.tokenizer)
    try:
        run_study(
            study,
            scorer,
            names,
            run.bounds,
            int(cfg.search.n_trials),
            int(cfg.seed),
            run.fixed,
            heartbeat_s=float(cfg.search.heartbeat_s),
            grace_s=float(cfg.search.grace_s),
            granularity=run.granularity,
        )
    finally:
        run.engine.close()
    return study


def build_pick(run: Run) -> dict:
    """App. A.2: the Pareto front of complete trials and the configured pick."""
    from dots.search.diagnosis import add_warnings
    from dots.search.report import pick_and_report

    study = run.results["study"]
    result = pick_and_report(
        study, run.sources, str(run.cfg.pick), run.run_dir, f"DoTS on {run.cfg.backbone.name}", run.granularity
    )
    record = run.run_dir / f"difficulty-{stable_hash(selection_inputs(run))}.jsonl"
    mode = str(run.cfg.search.get("answer_mode", "math"))
    return add_warnings(result, study, [q.id for q in run.results["selection"]], record, mode, run.run_dir)


def load_pick(run: Run) -> dict:
    return yaml.safe_load((run.run_dir / "result.yaml").read_text())


def build_export(run: Run) -> Path:
    from dots.export.model import export_model

    return export_model(
        run.cfg,
        run.task_vectors,
        run.alignment,
        run.results["pick"],
        run.run_dir,
        selection=[q.id for q in run.results["selection"]],
    )


def build_push(run: Run) -> bool:
    from dots.export.hub import try_push

    pushed = try_push(run.results["export"], str(run.cfg.export.push_to_hub), bool(run.cfg.export.private))
    if pushed:
        (run.run_dir / "pushed.json").write_text(str(run.cfg.export.push_to_hub))
    return pushed


def export_dir(run: Run) -> str:
    """The export's directory: export.dir (absolute, as the export resolves it) or <run_dir>/model."""
    return str(Path(str(run.cfg.export.dir)).expanduser().resolve()) if run.cfg.export.dir else "model"


def search_stages(run: Run) -> list[Stage]:
    """The pipeline: each stage names its output in the run directory and its inputs."""
    cfg = run.cfg
    study_key = {"identity": run.identity, "n_trials": int(cfg.search.n_trials), "fixed": run.fixed}
    stages = [
        Stage("task_vectors", ".", lambda r: None, build_vectors, exclusive=False),  # the cache skips
        Stage("selection", "selection.jsonl", selection_inputs, build_selection, load_selected),
        Stage("study", ".", lambda r: study_key, run_trials, exclusive=False),  # resumes by itself
    ]
    if run.fixed:
        return stages
    pick_key = {**study_key, "pick": str(cfg.pick)}
    stages.append(Stage("pick", "result.yaml", lambda r: pick_key, build_pick, load_pick))
    if cfg.export.enabled:
        export_key = {**pick_key, "export": to_plain(cfg.export), "config_from": cfg.backbone.get("config_from")}
        stages.append(
            Stage("export", export_dir(run), lambda r: export_key, build_export, lambda r: run.run_dir / export_dir(r))
        )
        if cfg.export.push_to_hub:
            stages.append(
                Stage(
                    "push",
                    "pushed.json",
                    lambda r: {**export_key, "repo": cfg.export.push_to_hub},
                    build_push,
                    lambda r: True,
                )
            )
    return stages


# --- the run ----------------------------------------------------------------------------


def prepare(cfg: DictConfig) -> Run:
    """Check the options and inputs, open the checkpoints, find the run directory (nothing written)."""
    check_search_config(cfg)
    bounds = check_range(list(cfg.search.range))
    backbone = cfg.backbone
    base = Checkpoint(str(backbone.base), backbone.get("revision"))
    sources = {str(k): Checkpoint(str(v), backbone.get("revision")) for k, v in backbone.sources.items()}
    alignment = align(base, sources)
    for field_name, values in config_differences(base, sources).items():
        log.warning(
            "config field %s differs: %s (the output takes config_from=%s)",
            field_name,
            values,
            backbone.get("config_from", "base"),
        )
    granularity = str(cfg.search.get("granularity", DEFAULT_GRANULARITY))
    if granularity == "module":
        check_module_groups(alignment)
    keys = list(sources)
    fixed = [fixed_point(p, keys, granularity) for p in cfg.search.fixed] if cfg.search.fixed else None
    if fixed and any(not bounds[0] <= x <= bounds[1] for p in fixed for x in p):
        raise DotsError(f"search.fixed coefficients must lie in search.range {list(bounds)}")
    identity = run_identity(cfg, base, sources)
    return Run(cfg, resolve_run_dir(cfg, identity), alignment, identity, bounds, fixed, granularity)


def check_module_groups(alignment: Alignment) -> None:
    """Every merged tensor has a module group (search.granularity=module), else a one-line
    DotsError naming the first that has none — before anything is written."""
    from dots.io.modules import module_group

    for name in alignment.merged:
        module_group(name)


def check_destinations(run: Run) -> None:
    """The run directory, the τ̃ cache and the export's directory can be made (`paths.check_creatable`)."""
    from dots.vectors.cache import default_cache_root

    check_creatable(run.run_dir, "run directory")
    check_creatable(run.cfg.get("cache_dir") or default_cache_root(), "task-vector cache directory")
    if run.cfg.export.enabled and not run.fixed and run.cfg.export.dir:
        check_creatable(Path(export_dir(run)).parent, "export directory's parent")


def memory_plan(run: Run) -> MemoryPlan:
    """What the run holds on each device and where τ̃ lives (`dots.plan`), printed;
    a DotsError (one line) when the engine and τ̃ cannot fit either way."""
    from dots.engines.setting import plan_search
    from dots.io.shapes import ModelShapes
    from dots.plan.render import describe

    plan = plan_search(run.cfg, ModelShapes.from_alignment(run.alignment))
    print("\n".join(describe(plan)))
    return plan


def run_search(cfg: DictConfig) -> Path:
    """The whole pipeline; returns the run directory."""
    from transformers import AutoTokenizer

    from dots.scoring.prompts import format_prompt

    run = prepare(cfg)
    check_destinations(run)
    plan = memory_plan(run)  # a run that cannot fit stops here, before anything is written
    run.queries = load_pool(cfg.pool)
    # the output's tokenizer (and the engine's): a source's when it added vocabulary
    tokenizer_dir = run.alignment.tokenizer_source().path
    try:
        run.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except Exception as exc:  # a broken tokenizer file: one line, before anything is written
        raise DotsError(f"cannot load the tokenizer of {tokenizer_dir}: {str(exc).splitlines()[0]}") from None
    run.prompts = {q.id: format_prompt(q.question, cfg.backbone.prompt, run.tokenizer) for q in run.queries}
    # every input and option is checked: from here on the run writes
    run.run_dir.mkdir(parents=True, exist_ok=True)
    with run_held(run):
        return run_in(run, plan)


def run_held(run: Run) -> Any:
    """One command at a time on a run directory (`locks.held_by_one`), unless several workers are
    configured to share it (search.workers > 1: they coordinate through the study's storage)."""
    if int(run.cfg.search.workers) > 1:
        return contextlib.nullcontext()
    return held_by_one(run.run_dir / ".run.lock", f"run directory {run.run_dir}")


def run_in(run: Run, plan: MemoryPlan) -> Path:
    """The stages of a checked, locked run."""
    from dots.engines.factory import build_engine

    cfg = run.cfg
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print(f"run directory: {run.run_dir}")
    engine_cfg = plan.engine_options(to_plain(cfg.engine))  # synth_cache decided (and vLLM's share)
    run.engine = LazyEngine(
        lambda: build_engine(
            engine_cfg,
            engine_model(cfg, run.alignment, run.task_vectors, run.run_dir),
            run.task_vectors,
            log_dir=run.run_dir,
        )
    )
    try:
        run_stages(run.run_dir, search_stages(run), run)
    finally:
        run.engine.close()
    if run.fixed:
        from dots.search.pareto import write_trials_csv
        from dots.search.report import trial_rows

        write_trials_csv(trial_rows(run.results["study"], run.sources, run.granularity), run.run_dir / "fixed.csv")
        print(f"scored {len(run.fixed)} fixed coefficient set(s): {run.run_dir / 'fixed.csv'}")
        return run.run_dir
    result = run.results["pick"]
    coefficients = result["coefficients"]
    if run.granularity != "model":  # 4 λ per source: one readable line
        coefficients = format_coefficients(coefficients)
    print(
        f"pick ({cfg.pick}): trial {result['trial']} λ={coefficients} "
        f"C={result['objectives']['consistency']:.4f} PPL={result['objectives']['perplexity']:.4f}"
    )
    for warning in result.get("warnings", []):
        print(f"warning: {warning}")
    print(f"dashboard: {dashboard_command(cfg.search.storage, run.run_dir)}")
    return run.run_dir
