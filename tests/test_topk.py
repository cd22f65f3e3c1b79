"""Exact top-k selection (dots.vectors.topk): the sampled bracket, its fallback, the tie rule."""

from __future__ import annotations

import pytest
import torch

import dots.vectors.topk as topk
from dots.vectors.masks import mask_largest, topk_mask
from dots.vectors.topk import kth_largest


def reference(values: torch.Tensor, k: int) -> tuple[float, int]:
    flat = values.reshape(-1)
    threshold = float(torch.sort(flat, descending=True).values[k - 1])
    return threshold, k - int((flat > threshold).sum())


@pytest.mark.parametrize("k", [1, 7, 50_000, 150_000, 299_999, 300_000])
def test_kth_largest_is_exact_on_the_sampled_path(k):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(300_000, generator=gen)  # > 4·SAMPLE: the bracket path
    assert kth_largest(x, k, chunk=40_000) == reference(x.abs(), k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kth_largest_with_massive_ties_at_the_bracket(dtype):
    """92% zeros (an RLVR-like τ in bf16): the threshold sits on a value the bracket
    cannot split, answered from the counts at its ends."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(400_000, generator=gen) * (torch.rand(400_000, generator=gen) < 0.08)
    x = x.to(dtype)
    for density in (0.05, 0.2, 0.5):
        k = round(density * x.numel())
        threshold, need = kth_largest(x, k)
        assert (threshold, need) == reference(x.abs().float(), k)
        mask, owed = mask_largest(x, threshold, need)
        assert owed == 0 and int(mask.sum()) == k
        order = torch.sort(x.abs().float(), descending=True, stable=True).indices[:k]
        expected = torch.zeros(x.numel(), dtype=torch.bool)
        expected[order] = True
        assert torch.equal(mask, expected)


def test_fallback_when_the_sample_misses(monkeypatch):
    """With no safety margin the bracket often misses; the radix fallback keeps it exact."""
    monkeypatch.setattr(topk, "BRACKET_SIGMAS", 0.0)
    calls = []
    radix = topk.global_kth_largest
    monkeypatch.setattr(topk, "global_kth_largest", lambda *a: calls.append(1) or radix(*a))
    gen = torch.Generator().manual_seed(3)
    for trial in range(20):
        x = torch.rand(5_000, generator=gen)
        k = 1 + trial * 240
        assert kth_largest(x, k, absolute=False, sample=64) == reference(x, k)
    assert calls, "the fallback never ran: the test no longer covers it"


def test_mask_largest_carries_owed_ties_across_tensors():
    """A global threshold: ties are taken in stream order until the owed count is paid."""
    parts = [torch.tensor([2.0, 1.0, 1.0]), torch.tensor([1.0, 3.0, 1.0])]
    owed = 3
    masks = []
    for part in parts:
        mask, owed = mask_largest(part, 1.0, owed, absolute=False)
        masks.append(mask.tolist())
    assert masks == [[True, True, True], [True, True, False]] and owed == 0


def test_topk_mask_edges():
    x = torch.tensor([[0.5, 2.0], [2.0, 1.0]])
    assert topk_mask(x, 0).sum() == 0 and topk_mask(x, 9).all()
    assert topk_mask(x, 1).tolist() == [[False, True], [False, False]]
    with pytest.raises(ValueError):
        kth_largest(x.reshape(-1), 0)
