"""In-process cases for dots/vectors and dots/io functions that no in-process test called (issue #49):
mutmut credits a test only with the functions it calls in the pytest process, so each of these had
every mutant "no tests". Streaming top-k membership (`TopKMask.select`, `TieCounter`), the empty
threshold, the τ̃ cache's summary, the resident forms' device moves, and the io helpers that name a
tensor's block and kind, a JSON value's type, a long value in an error, and a withdrawn claim."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.metadata import check_config
from dots.io.modules import layer_index, module_kind
from dots.io.problems import read_records, records_to_queries
from dots.io.records import RECORD, withdraw
from dots.vectors.compact import NEGZERO, VALUES, WHERE, CompactTensor, encode
from dots.vectors.forms import DenseTau, to_form
from dots.vectors.masks import TieCounter, TopKMask, topk_mask
from dots.vectors.topk import Threshold

# --- streaming top-k membership -----------------------------------------------------------------

ONE_UP = float(np.nextafter(np.float32(1.0), np.float32(2.0)))  # 0x3F800001: 1.0's high 16 bits, low bits 1
LEVELS = torch.tensor([0.0, 1.0, ONE_UP, 2.0, 3.0])
CHUNK = 97  # chunk edges fall anywhere in a run of ties


def _magnitudes() -> torch.Tensor:
    """600 non-negative float32 entries drawn from five values: about 120 ties of each."""
    pick = torch.randint(0, len(LEVELS), (600,), generator=torch.Generator().manual_seed(7))
    return LEVELS[pick]


def _threshold(whole: torch.Tensor, k: int) -> Threshold:
    """The Threshold of the top k by its docstring: value = the k-th largest, ties = how many
    entries equal to it complete k after those above it, equal = all entries equal to it."""
    value = float(torch.sort(whole, descending=True).values[k - 1])
    above = int((whole > value).sum())
    return Threshold(k, value, k - above, int((whole == value).sum()))


# k whose threshold is each level: 3.0 (k=50), 2.0 (k=200), ONE_UP (k=299), 1.0 (k=420), 0.0 (k=560)
KS = (50, 200, 299, 420, 560)


def _chunks(whole: torch.Tensor):
    for start in range(0, whole.numel(), CHUNK):
        yield start, whole[start : start + CHUNK]


def test_the_data_puts_each_threshold_on_its_own_level_with_a_chunk_cut_inside_its_ties():
    """The fixture's premise: every k of KS has its threshold on a different level, and the k-th
    tie falls strictly inside a chunk (so `select` must rank the ties of that chunk)."""
    whole = _magnitudes()
    thresholds = [_threshold(whole, k) for k in KS]
    assert [t.value for t in thresholds] == [3.0, 2.0, ONE_UP, 1.0, 0.0]
    for t in thresholds:
        ties_at = (whole == t.value).nonzero().view(-1)
        cut = int(ties_at[t.ties - 1])  # the flat index of the last tie kept
        later = ties_at[ties_at > cut]
        assert later.numel() and int(later[0]) // CHUNK == cut // CHUNK, t


@pytest.mark.parametrize("where_kind", ["all", "every_third", "odd"])
@pytest.mark.parametrize("counted", [False, True])
def test_selecting_chunk_by_chunk_gives_the_whole_tensors_top_k_at_those_positions(where_kind, counted):
    """`TopKMask.select` over the chunks in order, at ascending positions `where` of each chunk (all,
    or a subset that skips ties), equals `topk_mask` over the whole tensor at those positions, with
    `n_ties` from `TieCounter.counts` or counted by `select` itself."""
    whole = _magnitudes()
    masks = [TopKMask(_threshold(whole, k)) for k in KS] + [TopKMask(Threshold.none())]
    expected = [topk_mask(whole, k) for k in KS] + [torch.zeros(whole.numel(), dtype=torch.bool)]
    counter = TieCounter(masks)
    for i, (start, chunk) in enumerate(_chunks(whole)):
        n = chunk.numel()
        where = {
            "all": torch.arange(n),
            "every_third": torch.arange(i % 3, n, 3),
            "odd": torch.arange(1, n, 2),
        }[where_kind]
        counts = counter.counts(chunk) if counted else [None] * len(masks)
        for mask, want, n_ties in zip(masks, expected, counts):
            got = mask.select(chunk, where, n_ties)
            assert got.dtype == torch.bool and got.shape == where.shape
            assert torch.equal(got, want[start : start + n][where]), (mask.threshold, start)
    # every tie that completes k has been handed out
    assert [m.ties_left for m in masks] == [0] * len(masks)
    assert [int(e.sum()) for e in expected] == [*KS, 0]


def test_tie_counter_counts_each_thresholds_equal_entries_while_it_has_ties_left():
    """`TieCounter.counts`: per mask, the chunk's entries equal to its threshold (exactly: 1.0 and
    the next float up share their high bits), None once the mask has no ties left; a mask without
    ties (`Threshold.none()`) is None throughout, and all None when no mask has ties left."""
    whole = _magnitudes()
    thresholds = [_threshold(whole, k) for k in KS]
    masks = [TopKMask(t) for t in thresholds] + [TopKMask(Threshold.none())]
    counter = TieCounter(masks)
    for start, chunk in _chunks(whole):
        # active: fewer ties of the threshold lie before this chunk than the top k keeps
        active = [int((whole[:start] == t.value).sum()) < t.ties for t in thresholds]
        want = [int((chunk == t.value).sum()) if a else None for t, a in zip(thresholds, active)] + [None]
        assert counter.counts(chunk) == want, start
        for mask, n_ties in zip(masks, want):
            mask.mask(chunk, n_ties)  # hand out this chunk's ties
    assert counter.counts(whole) == [None] * len(masks)


def test_tie_counter_tells_apart_values_in_one_high_bucket_and_in_the_lowest_slot():
    """Thresholds 0.0 (the lowest wanted bucket: slot 0) and 1.0 / 1.0+ulp / 1.0+2ulp (one bucket,
    low bits 0, 1, 2): each count is its own value's, values in no wanted bucket count nowhere."""
    two_up = float(np.nextafter(np.float32(ONE_UP), np.float32(2.0)))
    chunk = torch.tensor([0.0, 0.0, 1.0, ONE_UP, ONE_UP, two_up, two_up, two_up, 5.0, 0.5, 1.5])
    values = [0.0, 1.0, ONE_UP, two_up, 7.0]
    masks = [TopKMask(Threshold(1, v, 1, 1)) for v in values]
    # by hand: two 0.0, one 1.0, two 1.0+ulp, three 1.0+2ulp, no 7.0
    assert TieCounter(masks).counts(chunk) == [2, 1, 2, 3, 0]
    # the same counts whatever order the masks come in
    assert TieCounter(masks[::-1]).counts(chunk) == [0, 3, 2, 1, 2]


def test_the_empty_threshold_keeps_nothing_and_owes_no_ties():
    """`Threshold.none()`: k 0, value +inf (no magnitude is above it), no ties, no equal entries."""
    none = Threshold.none()
    assert (none.k, none.value, none.ties, none.equal) == (0, math.inf, 0, 0)
    assert isinstance(none.k, int) and isinstance(none.ties, int) and isinstance(none.equal, int)
    big = torch.tensor([0.0, 1e38, float(torch.finfo(torch.float32).max)])
    assert not TopKMask(none).mask(big).any()


# --- the τ̃ cache's summary and the resident forms ----------------------------------------------


def test_task_vector_stats_summarise_each_sources_sparsified_vector(qwen_bf16):
    """`TaskVectors.stats`: per source, numel (entries of the merged tensors), norm ‖θ_i − θ0‖,
    kept (non-zero entries of τ̃), kept_norm ‖τ̃ / γ‖ and γ = norm / kept_norm (global rescale)."""
    tv = qwen_bf16.tv
    base = tv.base
    stats = tv.stats()
    assert list(stats) == ["sft", "rlvr"]
    for key, stat in stats.items():
        assert list(stat) == ["norm", "kept_norm", "gamma", "kept", "numel"]
        source = tv.entries[key]
        ckpt = Checkpoint(qwen_bf16.sources[key])
        numel = norm_sq = kept_sq = kept = 0
        for name in tv.names:
            theta0 = base.get(name)
            numel += theta0.numel()
            norm_sq += float((ckpt.get(name).double() - theta0.double()).pow(2).sum())
            tau = tv.get(key, name, theta0).double() / source.scale(name)
            kept += int(torch.count_nonzero(tau))
            kept_sq += float(tau.pow(2).sum())
        assert stat["numel"] == numel and stat["kept"] == kept
        assert 0 < kept < numel  # density 0.3: τ̃ is sparse
        assert stat["norm"] == pytest.approx(norm_sq**0.5, rel=1e-6)
        assert stat["kept_norm"] == pytest.approx(kept_sq**0.5, rel=1e-5)
        assert stat["gamma"] == pytest.approx(stat["norm"] / stat["kept_norm"], rel=1e-6) and stat["gamma"] > 1


def _compact(kept: list[int], n: int) -> tuple[CompactTensor, torch.Tensor]:
    """τ̃ of a bf16 tensor of n entries where θ_i exceeds θ0 (zeros) by 1 + position/8 at `kept`."""
    theta0 = torch.zeros(n, dtype=torch.bfloat16)
    theta = theta0.clone()
    theta[kept] = torch.tensor([1.0 + p / 8 for p in kept], dtype=torch.bfloat16)
    form, parts = encode(theta.float() - theta0.float(), theta, theta0)
    return CompactTensor((n,), form, parts[VALUES], parts.get(WHERE), parts.get(NEGZERO)), theta0


def test_a_dense_tau_moves_to_another_device_keeping_its_shape_and_values():
    """`DenseTau.to`: the same shape, its float32 data on the new device (meta here); moved back to
    the CPU, the very values; the original stays where it was."""
    ct, theta0 = _compact([3, 9, 40], 64)
    dense = to_form(ct, theta0, "dense")
    assert isinstance(dense, DenseTau)
    moved = dense.to("meta")
    assert isinstance(moved, DenseTau) and moved is not dense
    assert moved.shape == (64,) and moved.data.device.type == "meta"
    assert moved.data.dtype == torch.float32 and moved.data.numel() == 64
    assert dense.data.device.type == "cpu"
    back = dense.to(torch.device("cpu"))
    expected = torch.zeros(64)
    expected[[3, 9, 40]] = torch.tensor([1 + 3 / 8, 1 + 9 / 8, 1 + 40 / 8])
    assert torch.equal(back.data, expected)


def test_a_sparse_tau_moves_positions_and_values_to_another_device():
    """`SparseTau.to` (what `to_form(..., "sparse")` holds): the same shape, its int32 positions and
    float32 values both on the new device; moved to the CPU, the same positions and values."""
    ct, theta0 = _compact([5, 17, 33, 60], 64)
    sparse = to_form(ct, theta0, "sparse")
    moved = sparse.to("meta")
    assert type(moved) is type(sparse) and moved is not sparse
    assert moved.shape == (64,)
    assert moved.positions.device.type == "meta" and moved.values.device.type == "meta"
    assert moved.positions.dtype == torch.int32 and moved.values.dtype == torch.float32
    assert moved.positions.numel() == moved.values.numel() == 4
    assert sparse.positions.device.type == "cpu" and sparse.values.device.type == "cpu"
    back = sparse.to("cpu")
    assert back.positions.tolist() == [5, 17, 33, 60]
    assert back.values.tolist() == [1 + 5 / 8, 1 + 17 / 8, 1 + 33 / 8, 1 + 60 / 8]


# --- dots.io ------------------------------------------------------------------------------------


def test_a_config_error_shows_a_value_whole_up_to_80_characters_and_cuts_a_longer_one():
    """check_config names the bad value by its repr: whole when 80 characters or fewer, else its
    first 77 characters and "..." (80 in all)."""
    file = Path("config.json")
    fits = "x" * 78  # repr: 80 characters with its quotes
    with pytest.raises(DotsError) as err:
        check_config({"hidden_size": fits}, file)
    assert str(err.value) == f"config.json: field hidden_size must be an integer >= 1, got '{fits}'"
    longer = "y" * 79  # repr: 81 characters -> the quote and 76 y's, then ...
    with pytest.raises(DotsError) as err:
        check_config({"hidden_size": longer}, file)
    shown = str(err.value).split("got ", 1)[1]
    assert shown == "'" + "y" * 76 + "..." and len(shown) == 80


@pytest.mark.parametrize(
    "name, index",
    [
        ("model.layers.12.self_attn.q_proj.weight", 12),
        ("layers.0.mlp.up_proj.weight", 0),  # at the start of the name
        ("transformer.h.3.attn.c_attn.weight", 3),
        ("gpt_neox.layers.7.attention.dense.bias", 7),
        ("encoder.layer.5.output.dense.weight", 5),
        ("model.blocks.21.ffn.weight", 21),
        ("model.norm.weight", None),
        ("model.embed_tokens.weight", None),
        ("model.layers.7", None),  # no dot after the index
        ("model.mylayers.2.mlp.weight", None),  # not a whole part of the name
        ("model.layers.x.mlp.weight", None),
    ],
)
def test_layer_index_reads_the_block_number_of_a_parameter(name, index):
    """`layer_index`: the integer after `layers.`/`h.`/`blocks.`/`layer.` (a whole part of the
    name, followed by a dot); None outside the blocks."""
    assert layer_index(name) == index


@pytest.mark.parametrize(
    "name, kind",
    [
        ("model.layers.3.self_attn.q_proj.weight", "self_attn.q_proj"),
        ("model.layers.1.self_attn.k_proj.bias", "self_attn.k_proj"),
        ("model.layers.0.input_layernorm.weight", "input_layernorm"),
        ("model.layers.11.mlp.experts", "mlp.experts"),  # no suffix to drop
        ("model.embed_tokens.weight", "embed_tokens"),
        ("model.norm.weight", "norm"),
        ("lm_head.weight", "lm_head"),
        ("transformer.wte.weight", "transformer.wte"),  # only `model.` is a prefix
        ("model.layers.2.model.proj.weight", "model.proj"),  # inside a block, `model.` is kept
        ("a.bias.weight", "a"),  # .weight, then .bias
        ("a.weight.bias", "a.weight"),
        ("weightless", "weightless"),
    ],
)
def test_module_kind_drops_the_prefix_block_and_suffix(name, kind):
    """`module_kind`: the name after its block (`layers.<i>.`), or without `model.` outside the
    blocks, less a trailing `.weight` and then `.bias`."""
    assert module_kind(name) == kind


@pytest.mark.parametrize(
    "record, named",
    [
        (None, "null"),
        (True, "true/false"),
        (False, "true/false"),
        (3, "a number"),
        (2.5, "a number"),
        ("text", "a text"),
        ([1, 2], "an array"),
        ((1, 2), "tuple"),  # no JSON name: Python's
    ],
)
def test_a_record_that_is_not_an_object_is_named_by_its_json_type(record, named):
    """records_to_queries: a record that is not a JSON object is one error naming its JSON type."""
    with pytest.raises(DotsError) as err:
        records_to_queries([record], {}, "pool p.jsonl")
    assert str(err.value) == f"pool p.jsonl: record 0: a record must be a JSON object, got {named}"


def test_a_jsonl_line_that_is_not_an_object_is_named_by_its_line_and_json_type(tmp_path):
    """read_records (jsonl): a line holding null, a flag, a number, a text or an array is one
    error naming the file, the line and the value's JSON type."""
    cases = {"null": "null", "false": "true/false", "7": "a number", "-0.5": "a number"}
    cases.update({'"q"': "a text", "[]": "an array"})
    for line, named in cases.items():
        path = tmp_path / "pool.jsonl"
        path.write_text('{"prompt": "1+1="}\n\n' + line + "\n")
        with pytest.raises(DotsError) as err:
            read_records({"kind": "jsonl", "path": str(path)}, "pool")
        assert str(err.value) == f"{path}:3: a record must be a JSON object, got {named}"


def test_withdraw_removes_a_directory_holding_only_the_record_own_names_and_locks(tmp_path):
    """`withdraw`: the directory goes (True) when it holds nothing but its record, names `own`
    recognises and lock files; an empty one goes too."""
    out = tmp_path / "out"
    out.mkdir()
    for name in (RECORD, "model.safetensors", "config.json", ".x.lock"):
        (out / name).write_text("w")
    assert withdraw(out, ["model.safetensors", "config.json", "README.md"]) is True
    assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert withdraw(empty, []) is True and not empty.exists()
    only_record = tmp_path / "record"
    only_record.mkdir()
    (only_record / RECORD).write_text("{}")
    assert withdraw(only_record, iter(())) is True and not only_record.exists()


@pytest.mark.parametrize(
    "entry, is_dir",
    [("notes.txt", False), ("model.safetensors", True), (".x.lock.old", False), ("lock", False)],
)
def test_withdraw_keeps_a_directory_holding_anything_else(tmp_path, entry, is_dir):
    """`withdraw` removes nothing (False) when the directory holds a name `own` does not
    recognise, or a folder even under a recognised name."""
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD).write_text("{}")
    (out / "config.json").write_text("{}")
    if is_dir:
        (out / entry).mkdir()
    else:
        (out / entry).write_text("mine")
    assert withdraw(out, ["config.json", "model.safetensors"]) is False
    assert sorted(p.name for p in out.iterdir()) == sorted([RECORD, "config.json", entry])


def test_withdraw_of_a_directory_that_is_gone_is_false(tmp_path):
    """`withdraw` of a path that does not exist (or cannot be listed) removes nothing: False."""
    assert withdraw(tmp_path / "never", ["x"]) is False
    file = tmp_path / "file"
    file.write_text("x")
    assert withdraw(file, ["x"]) is False and file.read_text() == "x"
