"""What each stage of a search does (its `build` and `load` functions): the task vectors, the
selection (and its recovery from a damaged file), the study's trials, the pick, the export and
the push. `dots.search.pipeline.search_stages` lists them with their inputs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from dots.errors import DotsError
from dots.io.inputs import taskvec_dir
from dots.io.problems import Query
from dots.keys import stable_hash
from dots.plain import to_plain
from dots.search.engine_model import source_activation
from dots.search.run import Run
from dots.search.selection import (
    DamagedSelection,
    SelectionConfig,
    choose,
    load_selection,
    random_selection,
    save_selection,
    score_difficulty,
)
from dots.search.study.scorer import Scorer
from dots.search.study.stopping import stop_rule
from dots.vectors.cache import TaskVectors, build_task_vectors
from dots.vectors.sparsify import SparsifyConfig

log = logging.getLogger("dots.search")


def build_vectors(run: Run) -> TaskVectors:
    """τ̃_i for every source (the cache shared by runs skips what is built)."""
    al = run.alignment
    return build_task_vectors(
        al.base,
        al.sources,
        SparsifyConfig(**to_plain(run.cfg.sparsify)),
        taskvec_dir(run.cfg.get("cache_dir")),
        alignment=al,
    )


def selection_inputs(run: Run) -> dict:
    inputs = {k: run.identity[k] for k in ("base", "sources", "selection", "pool", "prompt", "sparsify")}
    rule = str(run.cfg.search.get("consistency", "majority"))
    return inputs if rule == "majority" else {**inputs, "consistency": rule}  # earlier keys kept


def build_selection(run: Run) -> list[Query]:
    """docs/method.md §3: difficulty of every pool query under each source, then a balanced draw."""
    selection = draw_selection(run)
    save_selection(selection, run.run_dir / "selection.jsonl", stable_hash(selection_inputs(run)))
    return selection.queries


def draw_selection(run: Run) -> Any:
    """The selection of this run's inputs (the difficulty record makes the same draw again), unsaved."""
    cfg = SelectionConfig(**to_plain(run.cfg.selection))
    key = stable_hash(selection_inputs(run))
    if cfg.strategy == "random":
        return random_selection(run.queries, cfg)
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
    return choose(run.queries, per_source, cfg)


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
    which the rows before the damage show. Refused, the damaged file is left as it is (for restoring)."""
    log.warning("%s; selecting again (the recorded difficulties are reused)", damage)
    selection = draw_selection(run)
    if not set(damage.intact_ids) <= {q.id for q in selection.queries}:
        raise DotsError(
            f"{damage}, and selecting again chose other queries than the study was scored on: restore it "
            "from a copy, or move study.db away to start the study again"
        )
    save_selection(selection, run.run_dir / "selection.jsonl", stable_hash(selection_inputs(run)))
    return selection.queries


def study_name(run: Run) -> str:
    return run.cfg.search.study_name or f"dots-{stable_hash(run.identity, 12)}" + ("-fixed" if run.fixed else "")


def run_trials(run: Run) -> Any:
    """docs/method.md §4: the study, extended until it holds search.n_trials complete trials."""
    import optuna

    from dots.search.study.trials import open_storage, open_study, run_study
    from dots.search.study.workers import recover_stale_trials

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
            stop=stop_rule(cfg.search),
            told=run.tracking.callbacks(),
        )
    finally:
        run.engine.close()
    return study


def build_pick(run: Run) -> dict:
    """App. A.2: the Pareto front of complete trials and the configured pick."""
    from dots.search.pick.diagnosis import pick_warnings
    from dots.search.pick.report import pick_and_report

    record = run.run_dir / f"difficulty-{stable_hash(selection_inputs(run))}.jsonl"
    selected = [q.id for q in run.results["selection"]]
    mode = str(run.cfg.search.get("answer_mode", "math"))
    low = float(run.cfg.search.range[0])
    return pick_and_report(
        run.results["study"],
        run.sources,
        str(run.cfg.pick),
        run.run_dir,
        f"DoTS on {run.cfg.backbone.name}",
        run.granularity,
        lambda study, result: pick_warnings(study, result, selected, record, mode, low),
    )


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
