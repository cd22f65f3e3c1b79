"""The restart side of benchmarks/search/restart.py, run as `--restart-job` in a process of its
own: for each trial of a dots run, θ(λ) written to disk, a fresh engine started on it, the same
Scorer as dots', the engine closed and the directory deleted, each step timed."""

from __future__ import annotations

import gc
import json
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

from benchmarks.search.restart_sides import SCORE_PARTS, read_trials
from benchmarks.swap.model import save_merged


class LoadedEngine:
    """An engine started on θ(λ) itself: Scorer's swap is a no-op (checked to be the same λ)."""

    def __init__(self, engine: Any, coefficients: Mapping[str, float]):
        self.engine = engine
        self.coefficients = dict(coefficients)

    def swap_coefficients(self, coefficients: Mapping[str, float]) -> None:
        if dict(coefficients) != self.coefficients:
            raise RuntimeError(f"engine holds λ={self.coefficients}, asked for {dict(coefficients)}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def restart_job(run_dir: Path, out: Path, scratch: Path) -> None:
    """The save-and-restart pipeline on the trials of a dots run (runs in its own process)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from dots.engines import build_engine
    from dots.engines.factory import resolve_engine_name
    from dots.io.align import align
    from dots.io.checkpoint import Checkpoint
    from dots.io.inputs import taskvec_dir
    from dots.options.study import study_options
    from dots.plain import to_plain as plain
    from dots.scoring import format_prompt
    from dots.search.selection import load_selection
    from dots.search.study.scorer import Scorer
    from dots.vectors import SparsifyConfig, build_task_vectors

    cfg = OmegaConf.load(run_dir / "config.yaml")
    if resolve_engine_name(str(cfg.engine.name)) == "vllm":
        import vllm  # noqa: F401  (imported once, as the official script does at its top)
    base = Checkpoint(str(cfg.backbone.base))
    sources = {str(k): Checkpoint(str(v)) for k, v in cfg.backbone.sources.items()}
    tv = build_task_vectors(
        base, sources, SparsifyConfig(**plain(cfg.sparsify)), taskvec_dir(cfg.cache_dir), alignment=align(base, sources)
    )
    tokenizer = AutoTokenizer.from_pretrained(str(base.path))
    selection_file = run_dir / "selection.jsonl"
    key = json.loads(selection_file.read_text().splitlines()[0])["key"]
    prompts = [
        format_prompt(q.question, cfg.backbone.prompt, tokenizer) for q in load_selection(selection_file, key).queries
    ]
    model_dir = scratch / "restart-model"  # one fixed path, as a script that overwrites its output
    results = []
    for row in read_trials(run_dir):
        lam = {s: float(row[f"lambda_{s}"]) for s in tv.sources}  # run_study's order: tv.sources
        t0 = time.perf_counter()
        save_merged(tv, lam, base.path, model_dir)
        t1 = time.perf_counter()
        engine = build_engine(cfg.engine, model_dir)
        t2 = time.perf_counter()
        res = Scorer(LoadedEngine(engine, lam), prompts, study_options(cfg.search), tokenizer)(
            lam, seed=int(cfg.seed) + row["number"]
        )
        t3 = time.perf_counter()
        engine.close()
        del engine
        gc.collect()
        t4 = time.perf_counter()
        shutil.rmtree(model_dir)
        t5 = time.perf_counter()
        times = {
            "write": t1 - t0,
            "start": t2 - t1,
            **{k: res.times[k] for k in SCORE_PARTS},
            "close": t4 - t3,
            "cleanup": t5 - t4,
            "total": t5 - t0,
        }
        results.append(
            {
                "number": row["number"],
                "lambda": lam,
                "consistency": res.consistency,
                "perplexity": res.perplexity,
                "tokens_generated": res.tokens,
                "time": times,
            }
        )
        print(
            f"restart trial {row['number']}: write {times['write']:.2f} s, start {times['start']:.2f} s, "
            f"score {t3 - t2:.2f} s, close {times['close']:.2f} s → C={res.consistency:.4f} "
            f"PPL={res.perplexity:.4f}",
            flush=True,
        )
    out.write_text(json.dumps({"engine": plain(cfg.engine), "trials": results}, indent=1))
