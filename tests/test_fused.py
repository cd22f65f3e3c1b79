"""The fused swap (`dots.vectors.fused`): one compiled pass per block, the streaming path's bytes in
every resident form, on the CPU (inductor's C++ backend) as CI runs it."""

import os

import pytest
import torch

import dots.vectors.synth
from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import build_task_vectors
from dots.vectors.forms import BY_SPEED
from dots.vectors.fused import FusedCombine
from dots.vectors.sparsify import SparsifyConfig
from dots.vectors.synth import ResidentSynthesizer

LAMBDAS = ({"sft": 0.79, "rl": 1.82}, {"sft": 0.0, "rl": -0.5}, {"sft": 1.3, "rl": 0.0}, {"sft": -2.0, "rl": 0.25})


@pytest.fixture(scope="module")
def tv(checkpoints, tmp_path_factory):
    family = checkpoints(
        {"dtype": torch.bfloat16}, sft={"seed": 1, "scale": 0.05}, rl={"seed": 2, "scale": 0.005, "density": 0.2}
    )
    sources = {k: Checkpoint(v) for k, v in family.sources.items()}
    cache = tmp_path_factory.mktemp("fused") / "cache"
    return build_task_vectors(Checkpoint(family.base), sources, SparsifyConfig(density=0.3), cache)


def raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def counting_calls() -> bool:
    """Whether this is mutmut's stats pass (docs/testing.md): the tests run with no mutant active
    to learn which test reaches which function, each call counted by a trampoline that
    torch.compile cannot trace. The compiled pass then breaks into pieces, some falling back to
    eager (dynamo's log), and the bitmask form's bytes differ from streaming's: bytes that say
    nothing about the code. Read at each call: mutmut sets the variable after importing the tests."""
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


@pytest.mark.parametrize("form", BY_SPEED)
def test_fused_pass_gives_the_streaming_bytes(tv, form, monkeypatch):
    """Every form, every set of sources a swap can combine (λ = 0 leaves one out), negative λ,
    yielded and written into live tensors, in blocks of 64 entries (tensors span several): the
    fused pass writes the streaming path's bytes, and it is the pass that ran."""
    monkeypatch.setattr(dots.vectors.synth, "CPU_BLOCK_ENTRIES", 64)
    streaming = ResidentSynthesizer(tv, device="cpu", form=form, fused=False)
    fused = ResidentSynthesizer(tv, device="cpu", form=form, fused=True)
    assert fused.fused["fused"] and fused.fused["compile_s"] > 0  # compiled and checked at start
    ran = []
    original = FusedCombine._pass
    monkeypatch.setattr(FusedCombine, "_pass", lambda self, *a: ran.append(1) or original(self, *a))
    for lam in LAMBDAS:
        want = {name: t.clone() for name, t in streaming(lam)}
        got = {name: t.clone() for name, t in fused(lam)}
        live = {name: torch.full_like(t, float("nan")) for name, t in want.items()}
        assert list(fused(lam, into=live)) == []
        for name, tensor in [] if counting_calls() else want.items():  # bytes: not in the stats pass
            assert torch.equal(raw(got[name]), raw(tensor)), (form, name, lam)
            assert torch.equal(raw(live[name]), raw(tensor)), (form, "into", name, lam)
    assert len(ran) >= len(tv.names) * len(LAMBDAS)  # the fused pass wrote (nearly) every tensor
    assert fused.fused["fused"]


def test_a_fused_pass_that_differs_is_turned_off_and_the_swap_stays_right(tv, monkeypatch):
    """The check at the first use of a combination: a pass writing other bytes is caught, the swap
    keeps the streaming path's bytes, and later swaps no longer take the fused pass."""
    original = FusedCombine._pass

    def off_by_one(self, out, *args):
        original(self, out, *args)
        out.view(torch.int16).add_(1)

    monkeypatch.setattr(FusedCombine, "_pass", off_by_one)
    fused = ResidentSynthesizer(tv, device="cpu", form="dense", fused=True)
    assert not fused.fused["fused"]
    streaming = ResidentSynthesizer(tv, device="cpu", form="dense", fused=False)
    lam = LAMBDAS[0]
    want = {name: t.clone() for name, t in streaming(lam)}
    for name, tensor in fused(lam):
        assert torch.equal(raw(tensor), raw(want[name])), name


def test_a_fused_pass_that_fails_to_compile_leaves_the_streaming_path(tv, monkeypatch):
    """No C++ compiler, a backend error: the engine starts, its swaps stream, the same bytes."""

    def fails(self, *args):
        raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")

    monkeypatch.setattr(FusedCombine, "_pass", fails)
    fused = ResidentSynthesizer(tv, device="cpu", form="index", fused=True)
    assert not fused.fused["fused"]
    streaming = ResidentSynthesizer(tv, device="cpu", form="index", fused=False)
    want = {name: t.clone() for name, t in streaming(LAMBDAS[0])}
    for name, tensor in fused(LAMBDAS[0]):
        assert torch.equal(raw(tensor), raw(want[name])), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("form", BY_SPEED)
def test_fused_pass_on_cuda_gives_the_streaming_bytes(tv, form):
    """The production path on a GPU (Triton kernels from inductor): the streaming path's bytes on
    the same device, with and without each source, and the check at start left it on."""
    streaming = ResidentSynthesizer(tv, device="cuda", form=form, fused=False)
    fused = ResidentSynthesizer(tv, device="cuda", form=form, fused=True)
    assert fused.fused["fused"]
    for lam in LAMBDAS:
        want = {name: t.clone() for name, t in streaming(lam)}
        for name, tensor in fused(lam):
            assert torch.equal(raw(tensor), raw(want[name])), (form, name, lam)
    assert fused.fused["fused"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("form", BY_SPEED)
def test_on_cuda_the_default_keeps_the_fused_pass_only_where_it_is_not_slower(tv, form):
    """The default on a GPU: compiled, checked, then raced against streaming on the device's own
    clock (synchronised), and on only where it did not lose; its swaps give the streaming bytes."""
    fused = ResidentSynthesizer(tv, device="cuda", form=form)
    raced = fused._fused.raced if fused._fused is not None else None
    assert raced is not None and fused.fused["fused"] == (raced[0] <= raced[1]), raced
    streaming = ResidentSynthesizer(tv, device="cuda", form=form, fused=False)
    want = {name: t.clone() for name, t in streaming(LAMBDAS[0])}
    for name, tensor in fused(LAMBDAS[0]):
        assert torch.equal(raw(tensor), raw(want[name])), (form, name)
