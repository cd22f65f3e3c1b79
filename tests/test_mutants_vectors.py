"""dots/vectors cases the mutation check found untested (docs/testing.md); each follows from the
docstrings of dots/vectors/compact.py, forms.py and residency.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dots.errors import DotsError
from dots.io.safetensors import TensorInfo
from dots.vectors.compact import NEGZERO, VALUES, WHERE, CompactTensor, encode, estimate_bytes
from dots.vectors.forms import check_resident_form
from dots.vectors.fused import FusedCombine, describe
from dots.vectors.residency import (
    check_synth_cache,
    resident_bytes,
    scratch_bytes,
    sharded_resident_bytes,
    stream_bytes,
)
from dots.vectors.sparsify import ties_cut_mask
from dots.vectors.synth import ResidentSynthesizer
from dots.vectors.topk import SAMPLE, kth_largest


def _compact(kept: list[int], n: int) -> CompactTensor:
    """τ̃ of a bf16 tensor of n entries where θ_i differs from θ0 (by 1) only at `kept`."""
    theta0 = torch.zeros(n, dtype=torch.bfloat16)
    theta = theta0.clone()
    theta[kept] = 1.0
    sparse = theta.float() - theta0.float()
    form, parts = encode(sparse, theta, theta0)
    return CompactTensor((n,), form, parts[VALUES], parts.get(WHERE), parts.get(NEGZERO))


@pytest.mark.parametrize("kept", [[5], list(range(0, 64, 2))])
def test_positions_are_int64_ascending_on_the_cpu(kept):
    """`positions`: the flat positions of the kept entries, int64 (the index form stores int32
    below 2^31 entries, the bitmask form bits), ascending, on the CPU."""
    ct = _compact(kept, 64)
    assert ct.form == ("index" if len(kept) == 1 else "bitmask")  # 4 bytes a kept entry vs n/8
    positions = ct.positions()
    assert positions.dtype == torch.int64 and positions.device.type == "cpu"
    assert positions.tolist() == kept == np.flatnonzero(ct.dense(torch.zeros(64)).numpy()).tolist()
    indexed = ct.indexed()  # a bitmask unpacked to the `index` form: int32 positions below 2^31 entries
    assert indexed.form == "index" and indexed.where.dtype == torch.int32 and indexed.where.tolist() == kept


def test_resident_bytes_adds_up_what_the_docstring_lists():
    """θ0 (every tensor) with the added rows, plus one output per merged tensor (with its added
    rows) unless `outputs` is False, plus τ̃ and the float32 scratch for the largest merged tensor."""
    tensors = {"a": TensorInfo((4, 8), torch.bfloat16), "b": TensorInfo((16,), torch.float32)}
    extra = {"a": 32}  # two added bf16 rows of 8
    scratch = scratch_bytes("cpu", 32)
    theta0 = 4 * 8 * 2 + 16 * 4 + 32
    assert resident_bytes(tensors, ["a"], extra, 100, "cpu", outputs=False) == theta0 + 100 + scratch
    assert resident_bytes(tensors, ["a"], extra, 100, "cpu") == theta0 + (64 + 32) + 100 + scratch
    assert resident_bytes(tensors, ["b"], {}, 0, "cpu") == (64 + 64) + 64 + scratch_bytes("cpu", 16)


def test_a_vllm_workers_share_counts_the_added_rows():
    """sharded_resident_bytes: 1/tp of θ0 of the merged tensors with their added rows and of τ̃,
    plus the larger of (the largest shard's output + the float32 scratch) and a second θ0 shard."""
    tensors = {"a": TensorInfo((4, 8), torch.bfloat16), "b": TensorInfo((16,), torch.float32)}
    theta0 = (64 + 32) + 64  # a with two added bf16 rows of 8, b
    swap = (64 + 32) // 2 + scratch_bytes("cpu", 32 // 2)
    expected = (theta0 + 100) // 2 + max(swap, theta0 // 2)
    assert sharded_resident_bytes(tensors, ["a", "b"], {"a": 32}, 100, "cpu", 2) == expected


def test_streaming_a_tensor_with_added_rows_holds_one_more_copy():
    """stream_bytes: θ0 and the output, one more copy with the added rows when a source adds
    rows, the τ̃ of it, + the float32 scratch; the largest such tensor."""
    tensors = {"a": TensorInfo((4, 8), torch.bfloat16)}
    scratch = scratch_bytes("cpu", 32)
    assert stream_bytes(tensors, ["a"], {}, {"a": 10}, "cpu") == 2 * 64 + 10 + scratch
    assert stream_bytes(tensors, ["a"], {"a": 32}, {"a": 10}, "cpu") == 2 * 64 + (64 + 32) + 10 + scratch


def test_bad_engine_choices_name_the_choices():
    """One line naming every choice, comma-separated, and the value given."""
    with pytest.raises(DotsError, match=r"one of auto, dense, sparse, index, bitmask, got 'fast'"):
        check_resident_form("fast")
    with pytest.raises(DotsError, match=r"one of auto, disk, memory, got 'ram'"):
        check_synth_cache("ram")
    assert check_resident_form("index") == "index" and check_synth_cache("disk") == "disk"
    with pytest.raises(DotsError, match=r"resident form must be one of dense, sparse, index, bitmask, got 'auto'"):
        ResidentSynthesizer(None, form="auto")  # checked before the task vectors are read  # type: ignore[arg-type]


def test_estimate_bytes_is_the_smaller_form():
    """The smaller of bitmask (n/8 + k·itemsize) and positions (k·(4 + itemsize)) for k = round(d·n),
    θ_i whole at density 1: bf16, n = 1000."""
    assert estimate_bytes(1000, 0.3, 2) == 125 + 300 * 2  # bitmask
    assert estimate_bytes(1000, 0.01, 2) == 10 * (4 + 2)  # positions
    assert estimate_bytes(1000, 1.0, 2) == 2000


def test_the_official_ties_cut_keeps_every_entry_tied_at_the_kth():
    """M = |x| ≥ t, t the k-th largest |x|, k = ⌊d·n⌋: |x| = 1, 3, 2, 2 at d = 0.5 gives t = 2 and
    three kept; k = ⌊0.8⌋ = 0 keeps nothing."""
    x = torch.tensor([[1.0, -3.0], [2.0, -2.0]])
    assert ties_cut_mask(x, 0.5).tolist() == [[False, True], [True, True]]
    assert not ties_cut_mask(x, 0.2).any() and ties_cut_mask(x, 0.2).shape == (2, 2)


def test_a_fused_pass_that_compiled_nothing_took_no_compile_time():
    """`compile_s` is the time compiling and checking took: none before the first compile;
    no fused pass at all reports the same."""
    assert describe(FusedCombine(torch.device("cpu"))) == {"fused": True, "compile_s": 0.0}
    assert describe(None) == {"fused": False, "compile_s": 0.0}


@pytest.mark.parametrize("absolute", [False, True])
def test_kth_largest_of_signed_values_on_the_sampled_path(absolute):
    """The k-th largest value (|value| with `absolute`) of a tensor larger than the sample, and how
    many entries equal to it complete the top k (distinct values here: one)."""
    x = torch.randn(4 * SAMPLE, generator=torch.Generator().manual_seed(3))
    for k in (1, 1000, 2 * SAMPLE):
        ranked = torch.sort(x.abs() if absolute else x, descending=True).values
        assert kth_largest(x, k, absolute=absolute) == (float(ranked[k - 1]), 1)


def test_the_official_cut_keeps_the_largest_magnitude_at_one_entry_and_a_bool_mask_at_none():
    x = torch.tensor([-5.0, 1.0, 2.0, 3.0])
    assert ties_cut_mask(x, 0.25).tolist() == [True, False, False, False]  # k = 1: |−5| is largest
    none = ties_cut_mask(x, 0.2)  # k = ⌊0.8⌋ = 0
    assert none.dtype == torch.bool and none.tolist() == [False] * 4


@pytest.mark.parametrize("kept", [[0, 9, 17], list(range(0, 2040, 2))])
def test_kept_in_casts_the_sources_values_to_the_bases_dtype_from_entry_0(kept):
    """where(M, θ_i, θ0) from a float32 source over a bfloat16 base: θ_i's values cast to θ0's dtype,
    the first entry included (the index form, and the bitmask form unpacked from entry 0)."""
    gen = torch.Generator().manual_seed(5)
    theta0 = torch.randn(2040, generator=gen).bfloat16()
    theta = theta0.float()
    theta[kept] += 0.5 + torch.rand(len(kept), generator=gen)  # not representable in bfloat16
    keep = torch.zeros(2040, dtype=torch.bool)
    keep[kept] = True
    form, parts = encode((theta - theta0.float()) * keep, theta, theta0)
    assert form == ("index" if len(kept) == 3 else "bitmask")
    ct = CompactTensor((2040,), form, parts[VALUES], parts.get(WHERE))
    got = ct.kept_in(theta0)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), torch.where(keep, theta.bfloat16(), theta0).view(torch.int16))
