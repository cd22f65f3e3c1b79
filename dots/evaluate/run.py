"""`python -m dots.evaluate`: models × benchmarks (docs/method.md §7) with one live engine.

    python -m dots.evaluate [backbone=qwen7b] [benchmarks=[aime24,math500]] [limit=16] \
        [+models.dots=outputs/search/<run>/model] [+models.ties=outputs/merge/ties]

The models are the backbone's base and sources (`include_backbone`) plus any
`+models.NAME=PATH`. One engine is started on the first model; every later model is
swapped in (`swap_checkpoint`) when it has the same architecture, tensors, shapes, dtypes,
config and tokenizer (checked with dots.io.align), else the engine is restarted, and the run
says why. Each model × benchmark writes `samples/<model>/<benchmark>.jsonl` (a header with
the key of everything the samples depend on, then one row per problem: id, gold,
completions, extracted answers, correct flags, score), appended chunk by chunk, so an
interrupted run resumes mid-benchmark and a complete file is never recomputed. The
summary goes to scores.json, scores.md (table, with the average) and scores.png.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

import dots.options.compose  # noqa: F401  (registers the ${dots_data:...} and ${lab:...} resolvers)
from dots.checks import positive_int, whole_number
from dots.engines.factory import check_engine_config
from dots.errors import DotsError
from dots.evaluate.benchmarks import Benchmark, load_problems, resolve_benchmark
from dots.evaluate.live import LiveEngine
from dots.evaluate.report import average, markdown_table, plot_scores, write_json
from dots.evaluate.samples import read_samples, run_benchmark, samples_key, summarize
from dots.io.checkpoint import Checkpoint
from dots.io.destination import claim, input_paths
from dots.io.inputs import check_checkpoint
from dots.io.problems import Query
from dots.paths import check_creatable, outputs_root
from dots.plain import to_plain

log = logging.getLogger("dots.evaluate")

LAB_BENCHMARKS = ["lab_add", "lab_sub"]
MATH_BENCHMARKS = ["aime24", "aime25", "amc", "math500", "minerva", "olympiad"]
QA_BENCHMARKS = ["arc_c", "gpqa", "mmlu_pro"]
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")


# --- which models -----------------------------------------------------------------------------


def check_model_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise DotsError(f"model name {name!r} must be letters, digits and _.+=- (it names a directory)")
    return name


def backbone_models(backbone: Any) -> dict[str, str]:
    """{'base': backbone.base, <source key>: path, ...} (lab checkpoints are built on first use)."""
    if OmegaConf.is_missing(backbone, "base"):
        raise DotsError(
            f"backbone {backbone.get('name')} has no base: pass backbone.base=PATH or include_backbone=false"
        )
    models = {"base": str(backbone.base)}
    sources = backbone.get("sources") or {}
    for key in sources:
        if OmegaConf.is_missing(sources, key):
            raise DotsError(
                f"backbone {backbone.get('name')} has no path for source {key}: pass "
                f"backbone.sources.{key}=PATH, or include_backbone=false with +models.NAME=PATH"
            )
        models[str(key)] = str(sources[key])
    return models


def resolve_models(cfg: DictConfig) -> dict[str, str]:
    """The backbone's models (if `include_backbone`) then `models`, in order; name → path or Hub id."""
    models: dict[str, str] = backbone_models(cfg.backbone) if cfg.get("include_backbone", True) else {}
    for name, path in (cfg.get("models") or {}).items():
        if path is None or str(path).strip() == "":
            raise DotsError(f"model {name}: no path given (+models.{name}=PATH)")
        models[str(name)] = str(path)
    if not models:
        raise DotsError("no model to evaluate: set include_backbone=true or add +models.NAME=PATH")
    for name in models:
        check_model_name(name)
    return models


# --- which benchmarks ---------------------------------------------------------------------------


def default_benchmarks(backbone: Any) -> list[str]:
    """The lab's test sets for the lab backbone; docs/method.md §7's nine benchmarks for the others."""
    test_set = backbone.get("test_set") if hasattr(backbone, "get") else None
    if str(backbone.get("name")) == "lab" or (test_set is not None and test_set.get("kind") == "lab"):
        return list(LAB_BENCHMARKS)
    return MATH_BENCHMARKS + QA_BENCHMARKS


def resolve_benchmarks(cfg: DictConfig) -> list[Benchmark]:
    """Definitions named in `benchmarks` (or inline mappings), with the run's knobs applied:
    definition < global `limit`/`max_tokens` < `overrides.<name>`."""
    entries = cfg.get("benchmarks", "auto")
    if entries is None or (isinstance(entries, str) and entries == "auto"):
        entries = default_benchmarks(cfg.backbone)
    elif isinstance(entries, str):
        entries = [e.strip() for e in entries.split(",") if e.strip()]
    overrides = cfg.get("overrides") or {}
    knobs = {k: cfg.get(k) for k in ("limit", "max_tokens") if cfg.get(k) is not None}
    dirs = list(cfg.get("benchmark_dirs") or [])
    out: list[Benchmark] = []
    for entry in entries:
        name = entry if isinstance(entry, str) else entry.get("name")
        merged = dict(knobs)
        if name in overrides:
            merged.update(
                to_plain(overrides[name]) if isinstance(overrides[name], DictConfig) else dict(overrides[name])
            )
        out.append(resolve_benchmark(entry, cfg, merged, dirs))
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        raise DotsError(f"benchmarks listed twice: {sorted({n for n in names if names.count(n) > 1})}")
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise DotsError(f"overrides for benchmark(s) not evaluated: {unknown}; evaluated: {names}")
    if not out:
        raise DotsError("no benchmark to evaluate")
    return out


# --- the run -----------------------------------------------------------------------------------------


def evaluate(
    models: Mapping[str, str | Path],
    benchmarks: Sequence[Benchmark],
    out_dir: str | Path,
    engine_cfg: Mapping | Any,
    chunk: int = 256,
    seed: int = 0,
    plot: bool = True,
    engine_factory: Callable | None = None,
    problems: Mapping[str, list[Query]] | None = None,
    title: str = "",
) -> dict:
    """Score every model on every benchmark; writes out_dir/{scores.json,scores.md,scores.png,samples/}."""
    if int(chunk) < 1:
        raise DotsError(f"chunk must be >= 1, got {chunk}")
    ckpts = {name: Checkpoint(path) for name, path in models.items()}  # every path checked before any work
    for name in models:
        check_model_name(name)
    problems = dict(problems or {})
    for bench in benchmarks:
        if bench.name not in problems:
            problems[bench.name] = load_problems(bench)
    # new, empty or an evaluation's (resumed): never a folder of other files or a model's
    out_dir = claim(out_dir, "evaluate", inputs=input_paths(ckpts)).create()
    report: dict = {
        "title": title,
        "models": {name: str(ckpt.path) for name, ckpt in ckpts.items()},
        "benchmarks": {
            b.name: {
                "metric": b.parsed_metric.name,
                "mode": b.mode,
                "problems": len(problems[b.name]),
                "samples": b.parsed_metric.n,
                "temperature": b.temperature,
                "top_p": b.top_p,
                "max_tokens": b.max_tokens,
                "prompt": b.prompt,
                "limit": b.limit,
                "data": b.data,
            }
            for b in benchmarks
        },
        "scores": {},
        "average": {},
    }
    live = LiveEngine(
        engine_cfg, engine_factory, chat_template=any(b.prompt == "chat" for b in benchmarks), log_dir=out_dir
    )
    try:
        for name, ckpt in ckpts.items():
            keys = {b.name: samples_key(b, problems[b.name], ckpt) for b in benchmarks}
            paths = {b.name: out_dir / "samples" / name / f"{b.name}.jsonl" for b in benchmarks}
            for bench in benchmarks:
                rows = read_samples(paths[bench.name], keys[bench.name])
                if all(p.id in rows for p in problems[bench.name]):
                    print(f"{name} · {bench.name}: complete in {paths[bench.name]}, not recomputed")
                else:
                    engine = live.activate(name, ckpt.path)
                    t0 = time.perf_counter()
                    generated = run_benchmark(
                        engine,
                        name,
                        bench,
                        problems[bench.name],
                        paths[bench.name],
                        keys[bench.name],
                        int(chunk),
                        int(seed),
                    )
                    rows = {r["id"]: r for r in generated}
                    print(f"{name} · {bench.name}: generated in {time.perf_counter() - t0:.1f} s")
                result = summarize([rows[p.id] for p in problems[bench.name]], bench)
                report["scores"].setdefault(name, {})[bench.name] = result
                print(
                    f"{name} · {bench.name}: {result['metric']} = {100 * result['score']:.1f} "
                    f"± {100 * result['stderr']:.1f} ({result['problems']} problems)"
                )
                write_json(report, out_dir / "scores.json")
            report["average"][name] = average(report["scores"][name], [b.name for b in benchmarks])
    finally:
        live.close()
    report["engine_starts"] = live.starts
    write_json(report, out_dir / "scores.json")
    table = markdown_table(report)
    (out_dir / "scores.md").write_text((f"# {title}\n\n" if title else "") + table)
    if plot:
        plot_scores(report, out_dir / "scores.png", title)
    print(table)
    return report


def output_dir(cfg: DictConfig) -> Path:
    if cfg.get("output_dir"):
        return Path(str(cfg.output_dir)).expanduser()
    return outputs_root() / "evaluate" / str(cfg.name)


def run_evaluate(cfg: DictConfig) -> dict:
    """The CLI's work: resolve models and benchmarks, load every problem, then evaluate."""
    chunk, seed = positive_int(cfg.chunk, "chunk"), whole_number(cfg.seed, "seed")
    benchmarks = resolve_benchmarks(cfg)
    problems = {b.name: load_problems(b) for b in benchmarks}  # bad data fails before any model loads
    models = resolve_models(cfg)
    # a missing model path fails before the output directory is made
    ckpts = [check_checkpoint(Checkpoint(path)) for path in models.values()]  # config, weights, tokenizer agree
    destination = claim(output_dir(cfg), "evaluate", inputs=input_paths(ckpts))
    out = check_creatable(output_dir(cfg), "evaluation directory")
    check_engine_config(cfg.engine)  # an unknown engine option fails before anything is written
    out = destination.create()
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    print(f"evaluation directory: {out}")
    return evaluate(
        models,
        benchmarks,
        out,
        cfg.engine,
        chunk=chunk,
        seed=seed,
        plot=bool(cfg.plot),
        problems=problems,
        title=str(cfg.name),
    )
