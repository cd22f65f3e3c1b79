"""`python -m dots.evaluate`: models × benchmarks (docs/method.md §7) with one live engine.

    python -m dots.evaluate [backbone=qwen7b] [benchmarks=[aime24,math500]] [limit=16] \
        [+models.dots=outputs/search/<run>/model] [+models.ties=outputs/merged/ties]

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
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dots.engines.factory import resolve_engine
from dots.errors import DotsError
from dots.evaluate.benchmarks import Benchmark, benchmark_from_spec, load_problems
from dots.evaluate.live import LiveEngine
from dots.evaluate.report import average, markdown_table, plot_scores, write_json
from dots.evaluate.samples import read_samples, run_benchmark, samples_key, summarize
from dots.io.checkpoint import Checkpoint
from dots.io.destination import claim, input_paths
from dots.io.inputs import check_checkpoint
from dots.io.problems import Query
from dots.options.engine import EngineOptions
from dots.options.evaluate import EvaluateOptions, check_model_name
from dots.paths import check_creatable
from dots.runtime.progress import log_third_party

__all__ = ["evaluate", "run_evaluate"]

log = logging.getLogger("dots.evaluate")


# --- the run -----------------------------------------------------------------------------------------


def evaluate(
    models: Mapping[str, str | Path],
    benchmarks: Sequence[Benchmark],
    out_dir: str | Path,
    engine: EngineOptions | Mapping[str, Any],
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
        engine, engine_factory, chat_template=any(b.prompt == "chat" for b in benchmarks), log_dir=out_dir
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
                    active = live.activate(name, ckpt.path)
                    t0 = time.perf_counter()
                    generated = run_benchmark(
                        active,
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


def run_evaluate(options: EvaluateOptions) -> dict:
    """The CLI's work: every benchmark definition checked and its problems loaded, every model
    opened, the destination and the engine config checked — then the evaluation."""
    benchmarks = [benchmark_from_spec(spec) for spec in options.benchmarks]
    problems = {b.name: load_problems(b) for b in benchmarks}  # bad data fails before any model loads
    # a missing model path fails before the output directory is made
    ckpts = [check_checkpoint(Checkpoint(path)) for path in options.models.values()]  # config, weights, tokenizer agree
    destination = claim(options.output_dir, "evaluate", inputs=input_paths(ckpts))
    check_creatable(options.output_dir, "evaluation directory")
    engine = resolve_engine(options.engine)  # auto resolved; vLLM's extra_args checked before anything is written
    out = destination.create()
    (out / "config.yaml").write_text(options.config_yaml)
    log_third_party(out / "third_party.log")  # other libraries' lines, off the terminal
    print(f"evaluation directory: {out}")
    return evaluate(
        options.models,
        benchmarks,
        out,
        engine,
        chunk=options.chunk,
        seed=options.seed,
        plot=options.plot,
        problems=problems,
        title=options.name,
    )
