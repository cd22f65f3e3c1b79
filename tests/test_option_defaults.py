"""One default per option, in the YAML (dots/conf): every default the typed options keep, and every
keyword default a library function keeps for an option, equals the composed config's value.

Values the YAML interpolates from another section (search.max_tokens: the backbone's) have no
single default and are left out; everything else is compared, so a default changed in one place
only fails here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from omegaconf import OmegaConf

from dots.options.compose import compose
from dots.options.engine import EngineOptions
from dots.options.pick import ConfirmOptions
from dots.options.search import ExportOptions
from dots.options.selection import SelectionConfig
from dots.options.study import AdaptiveConfig, StopRule, StudyOptions
from dots.paths import CONF_DIR
from dots.vectors.sparsify import SparsifyConfig


def defaults(cls: type) -> dict:
    """A dataclass's field defaults (factories called); fields without one are left out."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def literal(raw, key: str) -> bool:
    """The key is written as a value in the YAML, not as an interpolation of another option."""
    return not OmegaConf.is_interpolation(raw, key)


def comparable(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return list(value) if isinstance(value, tuple) else value


SEARCH = OmegaConf.load(CONF_DIR / "search.yaml")


@pytest.mark.parametrize(
    ("cls", "section"),
    [
        (StudyOptions, "search"),
        (AdaptiveConfig, "search.adaptive"),
        (StopRule, "search.stop"),
        (SelectionConfig, "selection"),
        (SparsifyConfig, "sparsify"),
        (ExportOptions, "export"),
        (ConfirmOptions, "confirm"),
    ],
)
def test_search_option_defaults_are_the_yamls(cls, section):
    composed = compose("search", ["backbone=qwen7b"])  # (lab sets its own search.n_trials)
    raw = OmegaConf.select(SEARCH, section)
    values = OmegaConf.to_container(OmegaConf.select(composed, section), resolve=True)
    kept = defaults(cls)
    assert set(kept) <= set(values), f"{section}: {sorted(set(kept) - set(values))} are no options"
    compared = [k for k in kept if literal(raw, k) or k == "n_trials"]
    assert compared, section
    for key in compared:
        assert comparable(kept[key]) == values[key], f"{section}.{key}: {kept[key]!r} != {values[key]!r}"


@pytest.mark.parametrize("name", ["auto", "hf", "vllm"])
def test_engine_option_defaults_are_every_engine_files(name):
    """Each engine file sets the options its engine reads, to the same default (auto.yaml: all)."""
    values = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "engine" / f"{name}.yaml"))
    kept = defaults(EngineOptions)
    assert set(values) <= set(kept)
    for key, value in values.items():
        if key != "name":
            assert kept[key] == value, f"engine/{name}.yaml {key}: {kept[key]!r} != {value!r}"
    if name == "auto":
        assert set(values) == set(kept)


def test_library_keyword_defaults_are_the_yamls():
    """Keyword defaults kept for an option by the functions that take it."""
    from dots.scoring.grade import consistency_of_labels
    from dots.scoring.perplexity import perplexity
    from dots.search.pick.diagnosis import diagnose_pick
    from dots.search.pick.pareto import pick
    from dots.search.pick.report import pick_and_report, trial_rows
    from dots.search.study.granularity import DEFAULT_GRANULARITY, coefficients_from_params, fixed_point, param_names

    composed = OmegaConf.to_container(compose("search", []), resolve=True)
    search = composed["search"]
    kept = {
        (param_names, "granularity"): search["granularity"],
        (fixed_point, "granularity"): search["granularity"],
        (coefficients_from_params, "granularity"): search["granularity"],
        (trial_rows, "granularity"): search["granularity"],
        (pick_and_report, "granularity"): search["granularity"],
        (consistency_of_labels, "rule"): search["consistency"],
        (perplexity, "mean"): search["perplexity"],
        (diagnose_pick, "mode"): search["answer_mode"],
    }
    assert DEFAULT_GRANULARITY == search["granularity"]
    for (fn, param), value in kept.items():
        assert inspect.signature(fn).parameters[param].default == value, f"{fn.__qualname__}({param}=...)"
    assert inspect.signature(diagnose_pick).parameters["range_low"].default is inspect.Parameter.empty
    # the front-only rules take the rule from the caller: the search's default (smoothed) is not one
    assert inspect.signature(pick).parameters["rule"].default is inspect.Parameter.empty
