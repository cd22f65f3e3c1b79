"""One default per option, in the YAML (issue #37), for merge, analyze, evaluate and the lab: a
library function or options dataclass keeps a default only where it equals dots/conf's, and the
typed options a command checks at its entry have no defaults of their own."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import pytest
import yaml

from dots.paths import CONF_DIR


def conf(name: str) -> dict[str, Any]:
    """A packaged config file as plain YAML data (interpolations left as written)."""
    return yaml.safe_load((CONF_DIR / f"{name}.yaml").read_text())


def keyword_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def field_defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def assert_same(defaults: dict[str, Any], yaml_values: dict[str, Any], names: dict[str, str]) -> None:
    """Each keyword/field default named in `names` (keyword → YAML key) equals the YAML's value."""
    for keyword, key in names.items():
        assert keyword in defaults, f"{keyword} has no default any more: drop it from this test"
        assert defaults[keyword] == yaml_values[key], (keyword, defaults[keyword], key, yaml_values[key])


def test_merge_checkpoints_defaults_are_merge_yaml():
    from dots.merge.executor import merge_checkpoints

    merge, backbone = conf("merge"), conf("backbone/lab")["backbone"]
    method = next(d["method"] for d in merge["defaults"] if isinstance(d, dict) and "method" in d)
    defaults = keyword_defaults(merge_checkpoints)
    assert_same(
        defaults, merge, {"overwrite": "overwrite", "cache_dir": "cache_dir", "max_shard_bytes": "max_shard_bytes"}
    )
    assert_same(defaults, merge, {"block_entries": "block_entries"})
    assert_same(defaults, backbone, {"revision": "revision", "config_from": "config_from"})
    assert defaults["method"] == method


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml")))
def test_method_options_defaults_are_their_yaml(name):
    from dots.merge.methods import get_method

    values = conf(f"method/{name}")
    method = values.pop("name")
    values.pop("weights", None)
    defaults = field_defaults(get_method(method).options)
    assert set(values) == set(defaults), (name, sorted(values), sorted(defaults))
    if method == name:  # (dare_linear.yaml, dare_ties.yaml: variants of dare.yaml)
        assert_same(defaults, values, {k: k for k in values})


def test_analyze_defaults_are_analyze_yaml():
    from dots.analyze.run import analyze
    from dots.options.analyze import AnalyzeConfig

    values = conf("analyze")
    values = {
        **values,
        **{f"roles.{k}": v for k, v in values["roles"].items()},
        "retentions": tuple(values["retentions"]),
    }
    fields = {f: f for f in ("eps", "relative_eps", "top_fraction", "retentions", "chunk_entries", "figures")}
    assert_same(field_defaults(AnalyzeConfig), values, {"sft": "roles.sft", "rlvr": "roles.rlvr", **fields})
    assert_same(keyword_defaults(analyze), values, {"force": "force"})


def test_evaluate_defaults_are_evaluate_yaml():
    from dots.evaluate.run import evaluate

    assert_same(keyword_defaults(evaluate), conf("evaluate"), {"chunk": "chunk", "seed": "seed", "plot": "plot"})


def test_fisher_calibration_defaults_are_sar_yaml():
    from dots.merge.calibration import builtin_calibration, calibration_set, pool_calibration

    sar = conf("method/sar")
    for fn in (builtin_calibration, calibration_set, pool_calibration):
        assert_same(keyword_defaults(fn), sar, {"n": "calibration_size", "seed": "calibration_seed"})


def test_checked_options_have_no_defaults_of_their_own():
    """The values a command's entry checks come from its YAML only."""
    from dots.lab.config import LabEval, LabOptions
    from dots.options.analyze import AnalyzeOptions
    from dots.options.backbone import Backbone
    from dots.options.evaluate import EvaluateOptions
    from dots.options.merge import MergeOptions

    for cls in (Backbone, MergeOptions, AnalyzeOptions, EvaluateOptions, LabOptions, LabEval):
        assert field_defaults(cls) == {}, cls.__name__
        assert not any(f.default_factory is not dataclasses.MISSING for f in dataclasses.fields(cls)), cls.__name__


def test_lab_options_are_lab_yaml():
    """Without overrides the lab's options are conf/lab.yaml, value for value and type for type."""
    from dots.lab.config import load_config

    plain = load_config().plain()
    values = conf("lab")
    assert plain == values
    assert {k: type(v) for k, v in plain["rlvr"].items()} == {k: type(v) for k, v in values["rlvr"].items()}


@pytest.mark.parametrize("package", ["merge", "evaluate", "analyze", "lab"])
def test_only_the_entry_reads_the_raw_config(package):
    """In these commands' packages only the `__main__` entry imports omegaconf: the stages take
    the checked options (dots/options/)."""
    import ast

    root = CONF_DIR.parent / package
    readers = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "omegaconf" or n.startswith("omegaconf.") for n in names):
                readers.append(str(path.relative_to(root)))
    assert readers == []
