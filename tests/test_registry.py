"""One registry shape (dots.registry) for merge methods, samplers, engines, trackers and pool kinds."""

import subprocess
import sys
import textwrap

import pytest

from dots.engines.factory import ENGINES, resolve_engine_name
from dots.errors import DotsError
from dots.io.problems import load_pool
from dots.merge.methods import get_method
from dots.options.engine import ENGINE_NAMES
from dots.options.search import TRACKERS, TrackingOptions
from dots.options.study import SAMPLERS as SAMPLER_NAMES
from dots.registry import Registry
from dots.search.study.samplers import SAMPLERS, build_sampler
from dots.search.study.tracking import TRACKERS as TRACKER_REGISTRY


def test_register_by_call_or_decorator_and_look_up_by_name():
    colours: Registry[int] = Registry("colour")
    colours.register("red", 1)

    @colours.register("blue")
    def blue() -> int:
        return 2

    assert colours.lookup("red") == 1 and colours.lookup("blue") is blue and blue() == 2
    assert colours.names() == ["blue", "red"] and set(colours) == {"red", "blue"} and len(colours) == 2
    with pytest.raises(ValueError, match="registered twice"):
        colours.register("red", 3)


def test_an_unknown_name_is_one_line_naming_the_choices_and_the_closest():
    colours: Registry[int] = Registry("colour")
    for i, name in enumerate(("green", "red", "grey")):
        colours.register(name, i)
    with pytest.raises(DotsError) as info:
        colours.lookup("gren")
    assert str(info.value) == "unknown colour 'gren'; choose one of green, grey, red; did you mean green or grey?"
    with pytest.raises(DotsError, match=r"^unknown colour 'blue'; choose one of green, grey, red$"):
        colours.lookup("blue")


@pytest.mark.parametrize(
    "lookup,message",
    [
        (lambda: get_method("nope"), "unknown merge method 'nope'; choose one of dare, dots_fixed, linear"),
        (lambda: build_sampler({"name": "cmaes"}, 0), "unknown sampler 'cmaes'; choose one of gp, nsga2, random, tpe"),
        (lambda: resolve_engine_name("vlm"), "unknown engine 'vlm'; choose one of auto, hf, vllm; did you mean vllm?"),
        (
            lambda: TrackingOptions("mlfow"),
            "unknown tracking backend 'mlfow'; choose one of mlflow, none, wandb; did you mean mlflow?",
        ),
        (lambda: load_pool({"kind": "csv"}), "unknown pool kind 'csv'; choose one of hub, jsonl, lab, parquet"),
    ],
    ids=["method", "sampler", "engine", "tracker", "pool"],
)
def test_every_registry_of_dots_has_the_one_shape(lookup, message):
    with pytest.raises(DotsError) as info:
        lookup()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_lab_pool_kind_is_found_without_importing_the_lab_first():
    """`dots.lab` registers the pool kind `lab`; `POOL_KINDS` imports it (its provider) the first
    time it is asked for a kind it lacks, so a script that imports only the loader finds it."""
    script = textwrap.dedent(
        """
        import sys
        from dots.io.problems import POOL_KINDS, load_pool
        assert "dots.lab" not in sys.modules and "lab" not in POOL_KINDS
        queries = load_pool({"kind": "lab", "split": "pool", "size": 4, "skills": ["add", "sub"]})
        print(len(queries), sorted({q.source for q in queries}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["4", "['add',", "'sub']"]


def test_the_names_the_options_accept_are_the_registries():
    """An engine, tracking backend or sampler the options accept is one the registry can build, and back
    (the options sit below the engines and the search, so they name them; this keeps one truth)."""
    assert sorted(ENGINE_NAMES) == sorted([*ENGINES.names(), "auto"])
    assert sorted(TRACKERS) == TRACKER_REGISTRY.names()
    assert sorted(SAMPLER_NAMES) == SAMPLERS.names()
