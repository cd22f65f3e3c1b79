"""`python -m dots.evaluate`: models × benchmarks (SPEC §7) with one live engine.

    python -m dots.evaluate [backbone=qwen7b] [benchmarks=[aime24,math500]] [limit=16] \
        [+models.dots=outputs/search/<run>/model] [+models.ties=outputs/merge/ties]

The models are the backbone's base and sources (`include_backbone`) plus any
`+models.NAME=PATH`. One engine is started on the first model; every later model is
swapped in (`swap_checkpoint`) when it has the same architecture, tensors, shapes, dtypes,
config and tokenizer (checked with dots.align), else the engine is restarted, and the run
says why. Each model × benchmark writes `samples/<model>/<benchmark>.jsonl` (a header with
the key of everything the samples depend on, then one row per problem: id, gold,
completions, extracted answers, correct flags, score), appended chunk by chunk, so an
interrupted run resumes mid-benchmark and a complete file is never recomputed. The
summary goes to scores.json, scores.md (table, with the average) and scores.png.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import hydra
from omegaconf import DictConfig, OmegaConf

import dots.lab  # noqa: F401  (registers the ${lab:...} resolver)
from dots.checkpoint import Checkpoint
from dots.errors import DotsError, cli_errors
from dots.eval_data import Benchmark, load_problems, resolve_benchmark
from dots.eval_metrics import aggregate, grade, problem_score
from dots.eval_report import average, markdown_table, plot_scores, write_json
from dots.memory import reuse_freed_memory
from dots.parallel import exit_on_sigterm
from dots.pools import Query
from dots.prompts import format_prompt

log = logging.getLogger("dots.evaluate")

LAB_BENCHMARKS = ["lab_add", "lab_sub"]
MATH_BENCHMARKS = ["aime24", "aime25", "amc", "math500", "minerva", "olympiad"]
QA_BENCHMARKS = ["arc_c", "gpqa", "mmlu_pro"]
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")
# files whose content decides how text becomes tokens and back (and when generation stops);
# for JSON files only the listed keys count (None: all keys but the ignored ones)
_TOKENIZER_FILES: dict[str, tuple[str, ...] | None] = {
    "tokenizer.json": None, "tokenizer_config.json": None, "special_tokens_map.json": None,
    "added_tokens.json": None, "vocab.json": None, "merges.txt": None, "tokenizer.model": None,
    "generation_config.json": ("bos_token_id", "eos_token_id", "pad_token_id"),
}
_IGNORED_TOKENIZER_KEYS = {"name_or_path", "_name_or_path", "model_max_length", "chat_template", "padding",
                           "truncation", "padding_side", "truncation_side", "clean_up_tokenization_spaces"}


def _hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


# --- which models -----------------------------------------------------------------------------

def check_model_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise DotsError(f"model name {name!r} must be letters, digits and _.+=- (it names a directory)")
    return name


def backbone_models(backbone: Any) -> dict[str, str]:
    """{'base': backbone.base, <source key>: path, ...} (lab checkpoints are built on first use)."""
    if OmegaConf.is_missing(backbone, "base"):
        raise DotsError(f"backbone {backbone.get('name')} has no base: pass backbone.base=PATH or include_backbone=false")
    models = {"base": str(backbone.base)}
    sources = backbone.get("sources") or {}
    for key in sources:
        if OmegaConf.is_missing(sources, key):
            raise DotsError(f"backbone {backbone.get('name')} has no path for source {key}: pass "
                            f"backbone.sources.{key}=PATH, or include_backbone=false with +models.NAME=PATH")
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
    """The lab's test sets for the lab backbone; SPEC §7's nine benchmarks for the others."""
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
            merged.update(OmegaConf.to_container(overrides[name], resolve=True)
                          if isinstance(overrides[name], DictConfig) else dict(overrides[name]))
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


# --- one engine, many models -----------------------------------------------------------------------

def tokenizer_identity(ckpt: Checkpoint, chat_template: bool = False) -> dict[str, str]:
    """Hashes of what a model's tokenizer and stop tokens depend on (the chat template only if asked)."""
    out = {}
    ignored = _IGNORED_TOKENIZER_KEYS - ({"chat_template"} if chat_template else set())
    for name, keys in _TOKENIZER_FILES.items():
        path = ckpt.path / name
        if not path.is_file():
            continue
        raw = path.read_bytes()
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            out[name] = hashlib.sha256(raw).hexdigest()[:16]
            continue
        if isinstance(obj, dict):
            obj = {k: v for k, v in obj.items() if (k in keys if keys else k not in ignored)}
        out[name] = _hash(obj)
    if chat_template and (ckpt.path / "chat_template.jinja").is_file():
        out["chat_template.jinja"] = hashlib.sha256((ckpt.path / "chat_template.jinja").read_bytes()).hexdigest()[:16]
    return out


def swap_incompatibility(live: Checkpoint, other: Checkpoint, check_dtypes: bool = True,
                         chat_template: bool = False) -> str | None:
    """Why `other` cannot be swapped into an engine running `live`, or None when it can: another
    architecture, tensor set, shape, dtype (when the engine keeps the checkpoint's), config field,
    tokenizer, or stop token."""
    from dots.align import align, config_differences

    if live.path.resolve() == other.path.resolve():
        return None
    try:
        alignment = align(live, {"next": other})
    except DotsError as exc:
        return str(exc)
    if set(live.names) != set(other.names):
        extra = sorted(set(other.names) ^ set(live.names))
        return f"different tensor names (e.g. {extra[0]})"
    if alignment.extra_rows:
        return f"different vocabulary size ({next(iter(alignment.extra_rows))})"
    if check_dtypes:
        odd = [n for n in live.names if live.info(n).dtype != other.info(n).dtype]
        if odd:
            return f"different dtype ({odd[0]}: {live.info(odd[0]).dtype} vs {other.info(odd[0]).dtype})"
    diffs = config_differences(live, {"next": other})
    if diffs:
        field = next(iter(diffs))
        return f"config field {field} differs ({diffs[field]['base']!r} vs {diffs[field].get('next')!r})"
    mine, theirs = tokenizer_identity(live, chat_template), tokenizer_identity(other, chat_template)
    if mine != theirs:
        odd = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return f"different tokenizer or stop tokens ({', '.join(odd)})"
    return None


class LiveEngine:
    """The run's engine: started on the first model, swapped to later ones when compatible."""

    def __init__(self, engine_cfg: Mapping | Any, factory: Callable | None = None, chat_template: bool = False):
        from dots.engines.factory import build_engine

        self.engine_cfg = engine_cfg
        self.factory = factory or build_engine
        self.engine: Any = None
        self.live: Checkpoint | None = None
        self.starts = 0
        dtype = engine_cfg.get("dtype", "auto") if hasattr(engine_cfg, "get") else "auto"
        self.check_dtypes = dtype in (None, "auto")
        self.chat_template = chat_template

    def activate(self, name: str, path: str | Path) -> Any:
        ckpt = Checkpoint(path)
        if self.engine is not None:
            reason = swap_incompatibility(self.live, ckpt, self.check_dtypes, self.chat_template)
            if reason is None:
                if self.live.path.resolve() != ckpt.path.resolve():
                    t0 = time.perf_counter()
                    self.engine.swap_checkpoint(ckpt.path)
                    log.info("%s: weights swapped into the live engine (%.1f s)", name, time.perf_counter() - t0)
                self.live = ckpt
                return self.engine
            print(f"{name}: starting a new engine ({reason})")
            self.close()
        t0 = time.perf_counter()
        self.engine = self.factory(self.engine_cfg, ckpt.path)
        self.starts += 1
        self.live = ckpt
        log.info("%s: engine started (%.1f s)", name, time.perf_counter() - t0)
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.live = None


# --- samples files --------------------------------------------------------------------------------

def samples_key(bench: Benchmark, problems: Sequence[Query], model: Checkpoint) -> str:
    """Hash of what a model × benchmark's samples depend on: settings, problems, weights' files."""
    from dots.taskvec import fingerprint

    return _hash({"benchmark": bench.identity(), "problems": [[p.id, p.question, p.answer] for p in problems],
                  "model": fingerprint(model)})


def read_samples(path: Path, key: str) -> dict[str, dict]:
    """Rows of a samples file written under `key` (empty when absent or stale); a torn last line is dropped."""
    if not path.is_file():
        return {}
    rows: dict[str, dict] = {}
    with open(path) as fh:
        lines = fh.read().splitlines()
    if not lines:
        return {}
    try:
        header = json.loads(lines[0]).get("header", {})
    except ValueError:
        return {}
    if header.get("key") != key:
        log.info("%s: settings, problems or model changed; recomputing", path)
        return {}
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except ValueError:
            break  # interrupted mid-write
        rows[row["id"]] = row
    return rows


def _rewrite(path: Path, header: dict, rows: Sequence[dict]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps({"header": header}) + "\n")
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def run_benchmark(engine: Any, model: str, bench: Benchmark, problems: Sequence[Query], path: Path, key: str,
                  chunk: int = 256, seed: int = 0) -> list[dict]:
    """Generate and grade what `path` lacks; returns every problem's row in problem order."""
    metric = bench.parsed_metric
    done = read_samples(path, key)
    todo = [(i, p) for i, p in enumerate(problems) if p.id not in done]
    if not todo:
        return [done[p.id] for p in problems]
    header = {"key": key, "model": model, "benchmark": bench.name, "metric": metric.name,
              "problems": len(problems), "samples": metric.n, "settings": bench.identity()}
    path.parent.mkdir(parents=True, exist_ok=True)
    _rewrite(path, header, [done[p.id] for p in problems if p.id in done])  # drops stale/torn lines
    tokenizer = getattr(engine, "tokenizer", None)
    # fixed chunk boundaries over the problem order: a resumed run draws the same seeds
    chunks: dict[int, list[tuple[int, Query]]] = {}
    for i, p in todo:
        chunks.setdefault(i // chunk, []).append((i, p))
    from dots.progress import progress_enabled
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn(f"[bold]{model} · {bench.name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, disable=not progress_enabled()) as bar, open(path, "a") as out:
        task = bar.add_task("problems", total=len(problems), completed=len(problems) - len(todo))
        for index, items in chunks.items():
            prompts = [format_prompt(p.question, bench.prompt, tokenizer, bench.system_prompt) for _, p in items]
            outs = engine.generate(prompts, n=metric.n, temperature=float(bench.temperature), top_p=float(bench.top_p),
                                   max_tokens=int(bench.max_tokens), seed=int(seed) + index)
            if len(outs) != len(items) or any(len(o) != metric.n for o in outs):
                raise RuntimeError(f"the engine returned {len(outs)} results for {len(items)} prompts")
            for (_, p), completions in zip(items, outs):
                answers, correct = grade(completions, str(p.answer), bench.mode,
                                         **({"letters": bench.data["letters"]} if "letters" in bench.data else {}))
                row = {"id": p.id, "source": p.source, "question": p.question, "gold": p.answer,
                       "completions": list(completions), "answers": answers, "correct": correct,
                       "score": problem_score(correct, metric)}
                done[p.id] = row
                out.write(json.dumps(row) + "\n")
            out.flush()
            bar.advance(task, len(items))
    return [done[p.id] for p in problems]


def summarize(rows: Sequence[dict], bench: Benchmark) -> dict:
    """Benchmark score (mean over problems), its standard error, and the no-answer share."""
    result = aggregate(r["score"] for r in rows)
    answers = [a for r in rows for a in r["answers"]]
    result["no_answer"] = sum(a is None for a in answers) / len(answers) if answers else 0.0
    result["metric"] = bench.parsed_metric.name
    return result


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
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "title": title,
        "models": {name: str(ckpt.path) for name, ckpt in ckpts.items()},
        "benchmarks": {b.name: {"metric": b.parsed_metric.name, "mode": b.mode, "problems": len(problems[b.name]),
                                "samples": b.parsed_metric.n, "temperature": b.temperature, "top_p": b.top_p,
                                "max_tokens": b.max_tokens, "prompt": b.prompt, "limit": b.limit, "data": b.data}
                       for b in benchmarks},
        "scores": {}, "average": {},
    }
    live = LiveEngine(engine_cfg, engine_factory, chat_template=any(b.prompt == "chat" for b in benchmarks))
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
                    rows = run_benchmark(engine, name, bench, problems[bench.name], paths[bench.name],
                                         keys[bench.name], int(chunk), int(seed))
                    rows = {r["id"]: r for r in rows}
                    print(f"{name} · {bench.name}: generated in {time.perf_counter() - t0:.1f} s")
                result = summarize([rows[p.id] for p in problems[bench.name]], bench)
                report["scores"].setdefault(name, {})[bench.name] = result
                print(f"{name} · {bench.name}: {result['metric']} = {100 * result['score']:.1f} "
                      f"± {100 * result['stderr']:.1f} ({result['problems']} problems)")
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
    return Path(os.environ.get("DOTS_OUTPUTS", "outputs")) / "evaluate" / str(cfg.name)


def run_evaluate(cfg: DictConfig) -> dict:
    """The CLI's work: resolve models and benchmarks, load every problem, then evaluate."""
    benchmarks = resolve_benchmarks(cfg)
    problems = {b.name: load_problems(b) for b in benchmarks}  # bad data fails before any model loads
    models = resolve_models(cfg)
    for name, path in models.items():
        Checkpoint(path)  # a missing model path fails before the output directory is made
    out = output_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    print(f"evaluation directory: {out}")
    return evaluate(models, benchmarks, out, cfg.engine, chunk=int(cfg.chunk), seed=int(cfg.seed),
                    plot=bool(cfg.plot), problems=problems, title=str(cfg.name))


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    logging.getLogger("dots").setLevel(logging.INFO)
    reuse_freed_memory()
    exit_on_sigterm()
    run_evaluate(cfg)


if __name__ == "__main__":
    main()
