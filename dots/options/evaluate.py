"""`python -m dots.evaluate`'s options (dots/conf/evaluate.yaml + the command line), checked once into
an `EvaluateOptions`: which models (name → path or Hub id), which benchmark definitions (resolved
from conf/benchmark/*.yaml, inline mappings and per-benchmark overrides), where the scores go, and
the run's knobs. Each value is checked here with a one-line error naming it; a definition's own
fields are checked by `dots.evaluate.benchmarks.benchmark_from_spec`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import dots.options.compose  # noqa: F401  (registers the ${dots_data:...} and ${lab:...} resolvers)
from dots.checks import check_flag, positive_int, whole_number
from dots.errors import DotsError
from dots.options.engine import EngineOptions, engine_options
from dots.paths import CONF_DIR, outputs_root
from dots.plain import to_plain

__all__ = ["EvaluateOptions", "benchmark_spec", "check_model_name", "evaluate_options"]

CONF_BENCHMARKS = CONF_DIR / "benchmark"
LAB_BENCHMARKS = ["lab_add", "lab_sub"]
MATH_BENCHMARKS = ["aime24", "aime25", "amc", "math500", "minerva", "olympiad"]
QA_BENCHMARKS = ["arc_c", "gpqa", "mmlu_pro"]
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")


@dataclass(frozen=True)
class EvaluateOptions:
    """One evaluation: `models` × `benchmarks` (resolved definitions, plain data) into `output_dir`
    with one live engine (`engine`); problems are sent `chunk`
    at a time, chunk i sampled with seed + i; `config_yaml` is the composed config, saved beside
    the scores."""

    name: str
    output_dir: Path
    models: Mapping[str, str]
    benchmarks: tuple[Mapping[str, Any], ...]
    chunk: int
    seed: int
    plot: bool
    engine: EngineOptions
    config_yaml: str


# --- benchmark definitions ------------------------------------------------------------------------


def available_benchmarks(dirs: Sequence[str | Path] = ()) -> list[str]:
    """The benchmark names of conf/benchmark/ and `dirs`."""
    names = set()
    for d in [*map(Path, dirs), CONF_BENCHMARKS]:
        if d.is_dir():
            names |= {p.stem for p in d.glob("*.yaml")}
    return sorted(names)


def definition_file(name: str, dirs: Sequence[str | Path] = ()) -> Path:
    """conf/benchmark/<name>.yaml, or <dir>/<name>.yaml from `dirs` (searched first)."""
    for d in [*map(Path, dirs), CONF_BENCHMARKS]:
        path = d / f"{name}.yaml"
        if path.is_file():
            return path
    raise DotsError(f"unknown benchmark {name!r}; known: {', '.join(available_benchmarks(dirs))}")


def benchmark_spec(
    entry: str | Mapping,
    context: Mapping | Any = None,
    overrides: Mapping | None = None,
    dirs: Sequence[str | Path] = (),
    defaults: Mapping | None = None,
) -> dict[str, Any]:
    """A benchmark definition as plain data: from a name (definition file) or an inline mapping,
    with `overrides` on top. `context` is the run's config: interpolations in a definition
    (`${math_parquet}`, `${backbone.max_tokens}`, `${oc.select:backbone.test_set.lab_overrides,[]}`)
    resolve in it. `defaults` fill fields the definition leaves null (default: max_tokens and
    prompt of the context's backbone)."""
    if isinstance(entry, str):
        origin = str(definition_file(entry, dirs))
        definition = OmegaConf.load(origin)
    else:
        origin = "inline benchmark"
        definition = OmegaConf.create(to_plain(entry))
    if overrides:
        definition = OmegaConf.merge(definition, OmegaConf.create(to_plain(overrides)))
    context_data = to_plain(context, resolve=False) if isinstance(context, DictConfig) else dict(context or {})
    root_cfg = OmegaConf.create(context_data)  # resolved lazily: only what a definition uses
    root_cfg["_benchmark"] = definition
    try:
        spec = to_plain(root_cfg["_benchmark"])
    except OmegaConfBaseException as exc:
        raise DotsError(f"{origin}: {str(exc).splitlines()[0]}") from None
    if isinstance(entry, str):
        spec.setdefault("name", entry)
    if not spec.get("name"):
        raise DotsError(f"{origin}: a benchmark needs a name")
    if defaults is None:  # the backbone's generation length and prompt template
        defaults = {k: OmegaConf.select(root_cfg, f"backbone.{k}", default=None) for k in ("max_tokens", "prompt")}
    for key, value in defaults.items():
        if spec.get(key) is None:
            spec[key] = value
    return spec


def default_benchmarks(backbone: Any) -> list[str]:
    """The lab's test sets for the lab backbone; docs/method.md §7's nine benchmarks for the others."""
    test_set = backbone.get("test_set")
    if str(backbone.get("name")) == "lab" or (test_set is not None and test_set.get("kind") == "lab"):
        return list(LAB_BENCHMARKS)
    return MATH_BENCHMARKS + QA_BENCHMARKS


def benchmark_specs(cfg: DictConfig, knobs: Mapping[str, int]) -> tuple[dict[str, Any], ...]:
    """The definitions named in `benchmarks` (or inline mappings), with the run's knobs applied:
    definition < global `knobs` (limit, max_tokens) < `overrides.<name>`."""
    entries = cfg.benchmarks
    if entries is None or (isinstance(entries, str) and entries == "auto"):
        entries = default_benchmarks(cfg.backbone)
    elif isinstance(entries, str):
        entries = [e.strip() for e in entries.split(",") if e.strip()]
    overrides = to_plain(cfg.overrides) or {}
    odd = [str(k) for k, v in overrides.items() if not isinstance(v, Mapping)]
    if odd:
        raise DotsError(f"overrides.{odd[0]} must be a mapping of benchmark fields (+overrides.{odd[0]}.limit=8)")
    dirs = [str(d) for d in cfg.benchmark_dirs or []]
    specs = []
    for entry in entries:
        if not isinstance(entry, (str, Mapping, DictConfig)):
            raise DotsError(f"benchmarks: {entry!r} is neither a benchmark name nor a definition")
        name = entry if isinstance(entry, str) else entry.get("name")
        specs.append(benchmark_spec(entry, cfg, {**knobs, **overrides.get(name, {})}, dirs))
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise DotsError(f"benchmarks listed twice: {sorted({n for n in names if names.count(n) > 1})}")
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise DotsError(f"overrides for benchmark(s) not evaluated: {unknown}; evaluated: {names}")
    if not specs:
        raise DotsError("no benchmark to evaluate")
    return tuple(specs)


# --- models ----------------------------------------------------------------------------------------


def check_model_name(name: str) -> str:
    """A model's name: it names a directory of samples."""
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


def evaluated_models(cfg: DictConfig) -> dict[str, str]:
    """The backbone's models (if `include_backbone`) then `models`, in order; name → path or Hub id."""
    include = check_flag(cfg.include_backbone, "include_backbone")
    models: dict[str, str] = backbone_models(cfg.backbone) if include else {}
    for name, path in (cfg.models or {}).items():
        if path is None or str(path).strip() == "":
            raise DotsError(f"model {name}: no path given (+models.{name}=PATH)")
        models[str(name)] = str(path)
    if not models:
        raise DotsError("no model to evaluate: set include_backbone=true or add +models.NAME=PATH")
    for name in models:
        check_model_name(name)
    return models


def evaluate_options(cfg: DictConfig) -> EvaluateOptions:
    """The checked options of a composed conf/evaluate.yaml (benchmark definitions resolved
    before the models: a bad definition fails before a lab trio is built)."""
    knobs = {k: positive_int(cfg[k], k) for k in ("limit", "max_tokens") if cfg[k] is not None}
    chunk, seed = positive_int(cfg.chunk, "chunk"), whole_number(cfg.seed, "seed")
    plot = check_flag(cfg.plot, "plot")
    specs = benchmark_specs(cfg, knobs)
    models = evaluated_models(cfg)
    name = str(cfg.name)
    output_dir = Path(str(cfg.output_dir)).expanduser() if cfg.output_dir else outputs_root() / "evaluate" / name
    return EvaluateOptions(
        name=name,
        output_dir=output_dir,
        models=models,
        benchmarks=specs,
        chunk=chunk,
        seed=seed,
        plot=plot,
        engine=engine_options(cfg.engine),
        config_yaml=OmegaConf.to_yaml(cfg),
    )
