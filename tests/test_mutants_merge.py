"""What `merge_method` and `Method.renamed` build (dots/merge/methods/declare.py), called directly:
the registered methods are declared when their modules are imported, so a mutation test that
only runs merges never sees a mutant of the decorator (docs/testing.md)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import pytest
import torch

from dots.errors import DotsError
from dots.io.problems import load_pool
from dots.keys import name_seed
from dots.merge.calibration import pool_calibration
from dots.merge.methods import METHODS, build_options, merge_method
from dots.merge.methods.base import DROP_BLOCK, drop_mask
from dots.merge.methods.declare import NoOptions
from dots.merge.methods.dots_fixed import DotsFixedOptions
from dots.merge.methods.sar import SarOptions, private_entry_magnitudes


@dataclass(frozen=True)
class ProbeOptions:
    scale: float = 1.0


def _first(stream, options):
    return None


def _facts(total, blocks, options):
    return None


def test_merge_method_keeps_every_declared_field():
    """The Method carries what the decorator was given: the options class, both passes (with the
    inputs their parameters name), the source bounds, blockwise, absolute and the summary."""
    method = merge_method(
        "probe",
        ProbeOptions,
        first_pass=_first,
        tensor_pass=_facts,
        min_sources=2,
        max_sources=3,
        blockwise=True,
        absolute=True,
        summary="a probe",
    )(lambda deltas, weights, options: deltas[0])
    assert method.name == "probe" and method.options is ProbeOptions and method.summary == "a probe"
    assert method.merge.inputs == ("deltas", "weights", "options") and method.weighted
    assert method.first_pass is not None and method.first_pass.fn is _first
    assert method.first_pass.inputs == ("stream", "options")
    assert method.tensor_pass is not None and method.tensor_pass.fn is _facts
    assert method.tensor_pass.inputs == ("total", "blocks", "options")
    assert (method.min_sources, method.max_sources) == (2, 3)
    assert method.blockwise is True and method.absolute is True


def test_merge_method_defaults():
    """Given only a name: no options (NoOptions), no passes, at least one source and no upper
    bound, whole tensors (not blockwise), and it returns a delta (not absolute)."""
    method = merge_method("plain")(lambda deltas: deltas[0])
    assert method.options is NoOptions and method.summary == ""
    assert method.first_pass is None and method.tensor_pass is None
    assert (method.min_sources, method.max_sources) == (1, None)
    assert method.blockwise is False and method.absolute is False
    assert not method.weighted and method.reads_deltas


def test_renamed_is_the_same_method_with_other_options():
    """ram_plus is ram renamed (declare.py): same functions and flags, its own name, options
    and summary; renaming again gives exactly what it was asked for."""
    ram, ram_plus = METHODS["ram"], METHODS["ram_plus"]
    again = ram.renamed("ram_again", ProbeOptions, "again")
    assert again.name == "ram_again" and again.options is ProbeOptions and again.summary == "again"
    assert again.merge is ram.merge and again.first_pass is ram.first_pass
    assert (again.min_sources, again.max_sources, again.blockwise) == (ram.min_sources, ram.max_sources, ram.blockwise)
    assert ram_plus.merge is ram.merge and ram_plus.options is not ram.options


@pytest.mark.parametrize(
    "options,values,option",
    [
        (DotsFixedOptions, {"density": 0.0}, "method.density"),
        (DotsFixedOptions, {"scope": "row"}, "method.scope"),
        (SarOptions, {"epsilon": -1.0}, "method.epsilon"),
        (SarOptions, {"calibration_size": 0}, "method.calibration_size"),
        (SarOptions, {"max_new_tokens": 0}, "method.max_new_tokens"),
        (SarOptions, {"fisher_dtype": "int8"}, "method.fisher_dtype"),
    ],
)
def test_bad_options_name_the_option_in_their_errors(options, values, option):
    """Each check names the option as the user writes it (`method.density`, …)."""
    with pytest.raises(DotsError, match=option.replace(".", r"\.")):
        options(**values)


def test_sar_private_entries_are_changed_by_exactly_one_model():
    """sar.py: changed is |δ| > ε (strictly), private is changed in exactly one of A, B, and the
    tensor pass ranks |r| = |δA + δB| there. ε = 0.25 (exact in float32) makes the bound exact."""
    a = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.75, -1.0])
    b = torch.tensor([0.25, 0.0, -0.375, 0.0, 0.5, 0.0])
    # 0: |δB| = ε is unchanged, 3: |δA| = ε likewise; 4: both changed, not private
    assert private_entry_magnitudes(a, b, 0.25).tolist() == [0.5, 0.375, 1.0]


def test_a_drop_mask_of_several_blocks_drawn_on_threads_is_its_definition():
    """drop_mask's docstring: block b is `torch.rand(len) < p` seeded by name_seed("name|index|b",
    seed), whichever thread draws it; with two intra-op threads the blocks go to a thread pool."""
    n = 2 * DROP_BLOCK + 5
    expected = torch.cat(
        [
            torch.rand(min(n, (b + 1) * DROP_BLOCK) - b * DROP_BLOCK, generator=torch.Generator().manual_seed(s)) < 0.3
            for b, s in ((b, name_seed(f"w|1|{b}", 7)) for b in range(3))
        ]
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        mask = drop_mask((n,), 0.3, "w", 7, index=1)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_an_int_option_is_a_whole_number_of_at_least_zero(bad):
    """build_options: an `int` field takes a whole number >= 0 ("3" from a command line is 3)."""
    assert build_options(METHODS["dare"], {"seed": "3"}).seed == 3
    with pytest.raises(DotsError, match=r"method\.seed must be"):
        build_options(METHODS["dare"], {"seed": bad})


def test_the_calibration_draws_n_of_the_pool_with_its_seed_and_keeps_a_pool_of_n_in_order(tmp_path):
    path = tmp_path / "pool.jsonl"
    rows = [{"prompt": f"q{i}", "reward_model": {"ground_truth": "" if i == 2 else str(i)}} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"kind": "jsonl", "path": str(path)}
    queries = load_pool(cfg)
    drawn = [q.question for q in random.Random(0).sample(queries, 3)]
    assert [e.prompt for e in pool_calibration(cfg, n=3)] == drawn  # the default seed is 0
    assert [e.prompt for e in pool_calibration(cfg, n=3, seed=5)] == [
        q.question for q in random.Random(5).sample(queries, 3)
    ]
    whole = pool_calibration(cfg, n=6, format_prompt=lambda q: f"<{q}>")
    assert [e.prompt for e in whole] == [f"<q{i}>" for i in range(6)]  # n = the pool: all, in order
    assert [e.answer for e in whole] == ["0", "1", None, "3", "4", "5"]  # an empty gold is none
