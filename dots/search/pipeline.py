"""The DoTS pipeline (Algorithm 1) as a list of stages, resumable stage by stage.

task vectors (cached) → difficulty-aware selection (selection.jsonl) → Optuna study over
λ ∈ [lo, hi]^K (or [lo, hi]^4K with search.granularity=module: one λ per source and module
group, dots.search.study.granularity) with ONE live engine whose weights are swapped per trial (study.db) →
pick from the Pareto front (result.yaml, trials.csv, pareto.png) → export (model/, with
a model card) → push to the Hub (when asked). `dots.search.stages` skips a stage whose
inputs are unchanged, so rerunning a command resumes where it stopped; the engine starts
only when a stage needs it, so a finished run re-reports in seconds.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from dots.errors import DotsError
from dots.io.align import Alignment, align, config_differences
from dots.io.checkpoint import Checkpoint
from dots.io.commit import write_atomic
from dots.io.destination import Destination, claim, input_paths
from dots.io.inputs import check_checkpoint, check_distinct_destinations, check_sources_differ, taskvec_dir
from dots.io.problems import load_pool
from dots.io.records import withdraw
from dots.options.search import SearchOptions, config_yaml, search_options
from dots.paths import check_creatable
from dots.plan.decide import MemoryPlan
from dots.runtime.locks import held_by_one
from dots.search.engine_model import engine_model
from dots.search.identity import resolve_run_dir, run_identity
from dots.search.pick.report import pick_line
from dots.search.run import Run
from dots.search.stages import Stage, run_stages
from dots.search.steps import (
    build_confirm,
    build_export,
    build_pick,
    build_push,
    build_selection,
    build_vectors,
    confirms,
    export_dir,
    load_confirm,
    load_pick,
    load_selected,
    run_trials,
    selection_inputs,
)
from dots.search.study.dashboard import dashboard_command
from dots.search.study.granularity import fixed_point
from dots.search.study.scorer import LazyEngine
from dots.search.study.tracking import open_tracking

__all__ = ["check_destinations", "prepare", "run_search"]

log = logging.getLogger("dots.search")


# --- the stages -------------------------------------------------------------------------


def search_stages(run: Run) -> list[Stage]:
    """The pipeline: each stage names its output in the run directory and its inputs."""
    options = run.options
    study_key = {"identity": run.identity, "n_trials": options.search.n_trials, "fixed": run.fixed}
    if options.search.stop.rule != "none":  # (a study stopped early is picked again when it goes on)
        study_key["stop"] = options.config["search"]["stop"]  # (keys hash the options as written)
    stages = [
        Stage("task_vectors", ".", lambda r: None, build_vectors, exclusive=False),  # the cache skips
        Stage("selection", "selection.jsonl", selection_inputs, build_selection, load_selected),
        Stage("study", ".", lambda r: study_key, run_trials, exclusive=False),  # resumes by itself
    ]
    if run.fixed:
        return stages
    pick_key = {**study_key, "pick": options.pick}
    if confirms(options):  # (a key without confirm when it is off: earlier runs' picks stay done)
        pick_key["confirm"] = options.config["confirm"]
        stages.append(Stage("confirm", "confirm.json", lambda r: pick_key, build_confirm, load_confirm))
    stages.append(Stage("pick", "result.yaml", lambda r: pick_key, build_pick, load_pick))
    if options.export.enabled:
        export = {k: v for k, v in options.config["export"].items() if k != "overwrite"}  # not what it holds
        export_key = {**pick_key, "export": export, "config_from": options.backbone.config_from}
        stages.append(
            Stage("export", export_dir(run), lambda r: export_key, build_export, lambda r: run.run_dir / export_dir(r))
        )
        if options.export.push_to_hub:
            stages.append(
                Stage(
                    "push",
                    "pushed.json",
                    lambda r: {**export_key, "repo": options.export.push_to_hub},
                    build_push,
                    lambda r: True,
                )
            )
    return stages


# --- the run ----------------------------------------------------------------------------


def checked_options(config: Any) -> SearchOptions:
    """The composed config (conf/search.yaml) checked into SearchOptions once (`search_options`),
    the sampler's options checked; options already checked are taken as they are."""
    from dots.search.study.samplers import build_sampler

    if isinstance(config, SearchOptions):
        return config
    options = search_options(config)
    build_sampler(options.sampler, options.seed)  # (its options: before anything is read)
    return options


def prepare(config: Any) -> Run:
    """Check the options (`checked_options`), open the checkpoints and check them against each other,
    align them, resolve `engine=auto` and check vLLM's extra_args, find the run directory (nothing written)."""
    from dots.engines.factory import resolve_engine

    options = checked_options(config)
    backbone = options.backbone
    base = Checkpoint(backbone.base, backbone.revision)
    sources = {k: Checkpoint(v, backbone.revision) for k, v in backbone.sources.items()}
    for ckpt in (base, *sources.values()):
        check_checkpoint(ckpt)  # config.json against the weights, the tokenizer against config.json
    alignment = align(base, sources)
    check_sources_differ(alignment)
    options = replace(options, engine=resolve_engine(options.engine))  # auto: vllm or hf (an import: after the inputs)
    for field_name, values in config_differences(base, sources).items():
        log.warning(
            "config field %s differs: %s (the output takes config_from=%s)", field_name, values, backbone.config_from
        )
    search = options.search
    if search.granularity == "module":
        check_module_groups(alignment)
    keys = list(sources)
    fixed = [fixed_point(p, keys, search.granularity) for p in search.fixed] if search.fixed else None
    low, high = search.range
    if fixed and any(not low <= x <= high for p in fixed for x in p):
        raise DotsError(
            f"search.fixed coefficients must lie in search.range {[low, high]}; "
            "to score points outside it, widen it too (e.g. search.range=[0.0,2.0])"
        )
    identity = run_identity(options.config, base, sources)
    return Run(options, resolve_run_dir(options, identity), alignment, identity, fixed)


def check_module_groups(alignment: Alignment) -> None:
    """Every merged tensor has a module group (search.granularity=module), else a one-line
    DotsError naming the first that has none — before anything is written."""
    from dots.io.modules import module_group

    for name in alignment.merged:
        module_group(name)


def check_destinations(run: Run) -> Destination:
    """The run directory, the τ̃ cache and the export's directory are claimed
    (`dots.io.destination`: dots deletes only what it wrote) and can be made
    (`paths.check_creatable`); the run directory's claim is returned, to create it."""
    from dots.export.model import export_destination
    from dots.keys import stable_hash

    inputs = input_paths([run.alignment.base, *run.alignment.sources.values()])
    replace = run.options.replace_run  # another search's results in run_dir: replaced
    run_dir = claim(run.run_dir, "search-run", replace, inputs, identity=stable_hash(run.identity, 16))
    check_creatable(run.run_dir, "run directory")
    cache = taskvec_dir(run.options.cache_dir, inputs)
    claim(cache, "taskvec-cache", inputs=inputs)
    check_creatable(cache, "task-vector cache directory")
    exported = run.options.export.enabled and not run.fixed
    if exported:
        export_destination(run.options.export, run.alignment, run.run_dir)
        if run.options.export.dir:
            check_creatable(Path(export_dir(run)).parent, "export directory's parent")
    check_distinct_destinations(  # each claimed alone above; now against each other
        {
            "run_dir": (run.run_dir, "grows"),
            "cache_dir": (run.options.cache_dir, "cache"),
            "export.dir": (run.options.export.dir if exported else None, "whole"),
        }
    )
    return run_dir


def memory_plan(run: Run) -> MemoryPlan:
    """What the run holds on each device and where τ̃ lives (`dots.plan`), printed;
    a DotsError (one line) when the engine and τ̃ cannot fit either way."""
    from dots.io.shapes import ModelShapes
    from dots.plan.render import announce
    from dots.plan.search import plan_search

    plan = plan_search(run.options.plan, ModelShapes.from_alignment(run.alignment))
    print("\n".join(announce(plan, run.options.config.get("show_plan", "brief"), run.run_dir / "plan.txt")))
    return plan


def run_search(config: Any) -> Path:
    """The whole pipeline on a composed config (conf/search.yaml) or its checked options;
    returns the run directory."""
    from transformers import AutoTokenizer

    from dots.scoring.prompts import format_prompt

    run = prepare(config)
    options = run.options
    run_dir = check_destinations(run)
    run.tracking = open_tracking(options.tracking)  # its package imported, its server reached: else one line
    plan = memory_plan(run)  # a run that cannot fit stops here, before anything is written
    run.queries = load_pool(options.pool)
    # the output's tokenizer (and the engine's): a source's when it added vocabulary
    tokenizer_dir = run.alignment.tokenizer_source().path
    try:
        run.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except Exception as exc:  # a broken tokenizer file: one line, before anything is written
        raise DotsError(f"cannot load the tokenizer of {tokenizer_dir}: {str(exc).splitlines()[0]}") from None
    run.prompts = {q.id: format_prompt(q.question, options.backbone.prompt, run.tokenizer) for q in run.queries}
    # every input and option is checked: from here on the run writes
    made = [d for d in (run.run_dir, taskvec_dir(options.cache_dir)) if not d.exists()]
    run_dir.create()
    try:
        with run_held(run):
            return run_in(run, plan)
    except DotsError:  # a bad input found by reading it (NaN/Inf weights): what this run made is withdrawn
        for made_here in made:
            withdraw(made_here, ("config.yaml", "plan.txt", "third_party.log"))
        raise


def run_held(run: Run) -> Any:
    """One command at a time on a run directory (`locks.held_by_one`), unless several workers are
    configured to share it (search.workers > 1: they coordinate through the study's storage)."""
    if run.options.search.workers > 1:
        return contextlib.nullcontext()
    return held_by_one(run.run_dir / ".run.lock", f"run directory {run.run_dir}")


def run_in(run: Run, plan: MemoryPlan) -> Path:
    """The stages of a checked, locked run."""
    from dots.engines.canary import checked
    from dots.engines.factory import build_engine
    from dots.plan.render import describe
    from dots.runtime.progress import log_third_party

    options = run.options
    write_atomic(run.run_dir / "config.yaml", config_yaml(options.config))
    write_atomic(run.run_dir / "plan.txt", "\n".join(describe(plan)) + "\n")  # (the terminal shows two lines)
    log_third_party(run.run_dir / "third_party.log")  # other libraries' lines (dots.runtime.progress)
    print(f"run directory: {run.run_dir}")
    engine = plan.engine_options(options.engine)  # synth_cache decided (and vLLM's share)
    run.engine = LazyEngine(  # every start (a requeued run's too) proves its swaps first
        lambda: checked(
            build_engine(
                engine,
                engine_model(options.backbone, run.alignment, run.task_vectors, run.run_dir),
                run.task_vectors,
                log_dir=run.run_dir,
            ),
            run.sources,
            run.run_dir,
        )
    )
    run.tracking.start(run)  # tracking=mlflow|wandb: the run's config (dots.search.study.tracking)
    try:
        run_stages(run.run_dir, search_stages(run), run)
    except BaseException as exc:
        run.tracking.close(exc)
        raise
    finally:
        run.engine.close()
    if run.fixed:
        from dots.search.pick.pareto import write_trials_csv
        from dots.search.pick.report import trial_rows

        write_trials_csv(trial_rows(run.results.study, run.sources, run.granularity), run.run_dir / "fixed.csv")
        print(f"scored {len(run.fixed)} fixed coefficient set(s): {run.run_dir / 'fixed.csv'}")
        run.tracking.finish(run)
        return run.run_dir
    result = run.results.pick
    assert result is not None  # (the pick stage ran)
    print(pick_line(result, options.pick))
    for warning in result.get("warnings", []):
        print(f"warning: {warning}")
    print(f"dashboard: {dashboard_command(options.search.storage, run.run_dir)}")
    run.tracking.finish(run)  # trials not logged yet, the pick, the files
    return run.run_dir
