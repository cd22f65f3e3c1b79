"""What each stage of a search does (its `build` and `load` functions): the task vectors, the
selection (and its recovery from a damaged file), the study's trials, the pick, the export and
the push. `dots.search.pipeline.search_stages` lists them with their inputs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from dots.errors import DotsError
from dots.io.commit import write_atomic
from dots.io.inputs import taskvec_dir
from dots.io.problems import Query
from dots.keys import stable_hash
from dots.search.engine_model import source_activation
from dots.search.run import Run
from dots.search.selection import (
    DamagedSelection,
    choose,
    load_selection,
    random_selection,
    save_selection,
    score_difficulty,
)
from dots.search.study.scorer import Scorer
from dots.vectors.cache import TaskVectors, build_task_vectors

__all__ = ["build_selection", "build_vectors", "export_dir", "load_selected"]

log = logging.getLogger("dots.search")


def build_vectors(run: Run) -> TaskVectors:
    """τ̃_i for every source (the cache shared by runs skips what is built)."""
    al = run.alignment
    return build_task_vectors(
        al.base, al.sources, run.options.sparsify, taskvec_dir(run.options.cache_dir), alignment=al
    )


def selection_inputs(run: Run) -> dict:
    inputs = {k: run.identity[k] for k in ("base", "sources", "selection", "pool", "prompt", "sparsify")}
    rule = run.options.search.consistency
    return inputs if rule == "majority" else {**inputs, "consistency": rule}  # earlier keys kept


def build_selection(run: Run) -> list[Query]:
    """docs/method.md §3: difficulty of every pool query under each source, then a balanced draw."""
    selection = draw_selection(run)
    save_selection(selection, run.run_dir / "selection.jsonl", stable_hash(selection_inputs(run)))
    return selection.queries


def draw_selection(run: Run) -> Any:
    """The selection of this run's inputs (the difficulty record makes the same draw again), unsaved."""
    cfg = run.options.selection
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
        mode=run.options.search.answer_mode,
        rule=run.options.search.consistency,
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
    return run.options.search.study_name or f"dots-{stable_hash(run.identity, 12)}" + ("-fixed" if run.fixed else "")


def run_trials(run: Run) -> Any:
    """docs/method.md §4: the study, extended until it holds search.n_trials complete trials."""
    import optuna

    from dots.search.pick.report import standing_pick
    from dots.search.study.storage import open_storage, open_study
    from dots.search.study.trials import run_study
    from dots.search.study.workers import recover_stale_trials

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    options, search = run.options, run.options.search
    study = open_study(options, open_storage(search.storage, run.run_dir), study_name(run))
    if search.workers <= 1:  # alone on this study: whatever is RUNNING was interrupted
        recover_stale_trials(study, -1.0, run.param_names, left_by="an interrupted run")
    scorer = Scorer(run.engine, [run.prompts[q.id] for q in run.selection], search, run.tokenizer)
    status = None if run.fixed else standing_pick(run.sources, options.pick, pick_context(run), run.granularity)
    try:
        run_study(
            study,
            scorer,
            run.sources,
            run.bounds,
            search.n_trials,
            options.seed,
            run.fixed,
            heartbeat_s=search.heartbeat_s,
            grace_s=search.grace_s,
            granularity=run.granularity,
            stop=search.stop,
            told=run.tracking.callbacks(),
            seeds=search.seeds,
            status=status,
        )
    except BaseException:
        run.engine.close()
        raise
    if not confirms(run.options) or run.fixed:  # (the confirmation scores on the same engine, unrestarted)
        run.engine.close()  # the export's synthesis gets the memory
    return study


def confirms(options: Any) -> bool:
    """The confirmation stage runs: confirm.enabled, and a pick rule that ranks by consistency
    (the knee trades C against PPL, so fresh C alone would not decide it)."""
    return bool(options.confirm.enabled) and options.pick != "knee"


def pick_context(run: Run) -> Any:
    """What the pick rules read besides C and PPL: the selected ids, the sources' answers, the range."""
    from dots.search.pick.diagnosis import source_answers
    from dots.search.pick.rules import PickContext

    record = run.run_dir / f"difficulty-{stable_hash(selection_inputs(run))}.jsonl"
    return PickContext([q.id for q in run.selection], source_answers(record), run.options.search.answer_mode,
                       run.bounds)  # fmt: skip


def build_confirm(run: Run) -> dict:
    """docs/method.md §5: the pick rule's top candidates scored again with fresh samples
    (confirm.json), on the selection or on held-out pool queries."""
    from dots.search.pick.confirm import confirm_candidates, confirm_options, confirmed_choice, held_out
    from dots.search.pick.report import complete_points
    from dots.search.pick.rules import rank

    options, confirm = run.options, run.options.confirm
    points = complete_points(run.results.study, run.sources, run.granularity)
    candidates = rank(options.pick, points, pick_context(run))[: confirm.top]
    ids = [q.id for q in run.selection]
    if confirm.queries == "held_out":
        ids = held_out([q.id for q in run.queries], ids, len(ids), options.seed)
    scorer = Scorer(run.engine, [run.prompts[i] for i in ids], confirm_options(options.search, confirm), run.tokenizer)
    key = stable_hash({"identity": run.identity, "confirm": options.config["confirm"], "pick": options.pick})
    try:
        rows = confirm_candidates(scorer, candidates, options.seed, run.run_dir, key, options.search.seeds)
    finally:
        run.engine.close()  # the export's synthesis gets the memory
    trials = run.results.study.get_trials(deepcopy=False)
    study_tokens = sum(t.user_attrs.get("tokens_generated") or 0 for t in trials)
    tokens = sum(r["tokens"] for r in rows)
    result = {
        "rule": options.pick, "top": confirm.top, "k": confirm.k, "queries": confirm.queries,
        "n_queries": len(ids), "points": rows, "pick": confirmed_choice(rows)["trial"] if rows else None,
        "tokens": tokens, "samples": sum(r["samples"] for r in rows), "study_tokens": study_tokens,
        "share": tokens / study_tokens if study_tokens else None,
    }  # fmt: skip
    write_atomic(run.run_dir / "confirm.json", json.dumps(result, indent=1))
    share = f" ({result['share']:.0%} of the study's)" if result["share"] is not None else ""
    log.info("confirmation: %d candidate%s, %d tokens%s", len(rows), "s" * (len(rows) != 1), tokens, share)
    return result


def load_confirm(run: Run) -> dict:
    return json.loads((run.run_dir / "confirm.json").read_text())


def build_pick(run: Run) -> dict:
    """App. A.2 and §5: the Pareto front of complete trials and the configured pick (on the
    confirmation's estimates when it ran)."""
    from dots.search.pick.diagnosis import pick_warnings
    from dots.search.pick.report import pick_and_report

    context = pick_context(run)  # (the sources' answers read once, for the rules and the warnings)
    mode, low = context.mode, run.bounds[0]
    return pick_and_report(
        run.results.study,
        run.sources,
        run.options.pick,
        run.run_dir,
        f"DoTS on {run.options.backbone.name}",
        run.granularity,
        lambda study, result: pick_warnings(study, result, context.selected, context.sources, mode, low),
        context=context,
        confirmation=getattr(run.results, "confirm", None),
    )


def load_pick(run: Run) -> dict:
    return yaml.safe_load((run.run_dir / "result.yaml").read_text())


def build_export(run: Run) -> Path:
    from dots.export.model import export_model

    assert run.results.pick is not None  # (the pick stage ran)
    return export_model(
        run.options.config,
        run.options.export,
        run.task_vectors,
        run.alignment,
        run.results.pick,
        run.run_dir,
        selection=[q.id for q in run.selection],
        config_from=run.options.backbone.config_from,
    )


def build_push(run: Run) -> bool:
    from dots.export.hub import try_push

    export, repo = run.options.export, str(run.options.export.push_to_hub)
    assert run.results.export is not None  # (the export stage ran)
    pushed = try_push(run.results.export, repo, export.private)
    if pushed:
        write_atomic(run.run_dir / "pushed.json", repo)
    return pushed


def export_dir(run: Run) -> str:
    """The export's directory: export.dir (absolute, as the export resolves it) or <run_dir>/model."""
    out = run.options.export.dir
    return str(Path(out).expanduser().resolve()) if out else "model"
