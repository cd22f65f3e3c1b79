"""DoTS synthesis θ0 + Σ λ_i τ̃_i (docs/method.md §2) on real tiny checkpoints."""

import pytest
import torch

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.vectors.synth import ResidentSynthesizer, synthesize, synthesize_dict


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def cache(request, checkpoints):
    family = checkpoints(
        {"dtype": request.param}, sft={"seed": 1, "scale": 0.05}, rl={"seed": 2, "scale": 0.005, "density": 0.2}
    )
    return Checkpoint(family.base), family.tv


def test_matches_eq6_in_base_dtype(cache):
    base, tv = cache
    lam = {"sft": 0.79, "rl": 1.82}
    out = synthesize_dict(tv, lam)
    assert list(out) == base.names  # every tensor, in checkpoint order
    for name in base.names:
        theta0 = base.get(name)
        assert out[name].dtype == theta0.dtype and out[name].device.type == "cpu"
        if name in tv.names:
            ref = theta0.float() + 0.79 * tv.get("sft", name) + 1.82 * tv.get("rl", name)
            # float32 sum (order of rounding may differ by one ulp), then one cast to the base dtype
            ulp = 2.0**-7 if theta0.dtype == torch.bfloat16 else 2.0**-22
            torch.testing.assert_close(out[name].float(), ref.to(theta0.dtype).float(), rtol=ulp, atol=1e-6)
        else:
            assert torch.equal(out[name], theta0)
    assert any(not torch.equal(out[n], base.get(n)) for n in tv.names)


def test_each_call_starts_from_the_pristine_base(cache):
    base, tv = cache
    first = synthesize_dict(tv, {"sft": 1.0, "rl": 1.0})
    synthesize_dict(tv, {"sft": 2.0, "rl": 0.0})  # another λ in between
    again = synthesize_dict(tv, {"sft": 1.0, "rl": 1.0})
    zero = synthesize_dict(tv, {"sft": 0.0, "rl": 0.0})
    for name in base.names:
        assert torch.equal(first[name], again[name])
        assert torch.equal(zero[name], base.get(name))  # λ = 0 is exactly θ0


def test_resident_synthesis_gives_the_same_bits(cache):
    base, tv = cache
    resident = ResidentSynthesizer(tv, device="cpu")
    assert resident.nbytes >= sum(base.info(n).nbytes for n in base.names)
    # compact τ̃: far less than the K dense float32 task vectors it replaces
    dense = sum(4 * base.info(n).numel for n in tv.names) * len(tv.sources)
    held = sum(ct.nbytes for per in resident.taus.values() for ct in per.values())
    assert held < dense / 2
    for lam in ({"sft": 0.79, "rl": 1.82}, {"sft": 0.0, "rl": 0.5}, {"sft": 0.79, "rl": 1.82}):
        stream = synthesize_dict(tv, lam)
        got = {name: t.clone() for name, t in resident(lam)}  # buffers are reused by the next call
        assert list(got) == list(stream)
        for name in stream:
            assert got[name].dtype == stream[name].dtype
            assert torch.equal(got[name], stream[name]), name
    with pytest.raises(DotsError):
        next(resident({"sft": 1.0}))


@pytest.mark.parametrize("block", [1, 7, 50])
def test_blocked_accumulation_gives_the_bits_of_whole_tensor_arithmetic(cache, monkeypatch, block):
    """CPU synthesis works its float32 accumulator in blocks (uneven ones here, tensor sizes are
    not multiples of 7): every output equals θ0 + λ1·τ̃1 + λ2·τ̃2 computed over whole tensors in
    float32, then cast — bit for bit, on both paths."""
    import dots.vectors.synth

    base, tv = cache
    monkeypatch.setattr(dots.vectors.synth, "CPU_BLOCK_ENTRIES", block)
    lam = {"sft": 0.79, "rl": 1.82}
    resident = ResidentSynthesizer(tv, device="cpu")
    assert resident._scratch.numel() == dots.vectors.synth.SCRATCH_BUFFERS * block
    got = {name: t.clone() for name, t in resident(lam)}
    assert max(base.info(n).numel for n in tv.names) > 2 * block  # really split
    for name, out in synthesize(tv, lam, device="cpu"):
        theta0 = base.get(name)
        if name in tv.names:
            ref = theta0.float()
            ref.add_(tv.get("sft", name), alpha=0.79).add_(tv.get("rl", name), alpha=1.82)
            ref = ref.to(theta0.dtype)
        else:
            ref = theta0
        assert torch.equal(out, ref), name
        assert torch.equal(got[name], ref), name


def test_is_lazy(cache, monkeypatch):
    """The stream reads a tensor's θ0 and τ̃ when it is asked for that tensor, not before: after the
    first item, only the first tensor was read; after all, each tensor exactly once."""
    base, tv = cache
    read_theta0: list[str] = []
    read_tau: list[tuple[str, str]] = []
    get, compact = Checkpoint.get, type(tv).compact

    def get_counted(self: Checkpoint, name: str) -> torch.Tensor:
        if self is base:  # (the τ̃ cache is read through Checkpoints too: counted by `compact`)
            read_theta0.append(name)
        return get(self, name)

    monkeypatch.setattr(Checkpoint, "get", get_counted)
    monkeypatch.setattr(
        type(tv), "compact", lambda self, key, name: read_tau.append((key, name)) or compact(self, key, name)
    )
    stream = synthesize(tv, {"sft": 1.0, "rl": 1.0}, device="cpu", base=base)
    assert read_theta0 == [] and read_tau == []  # nothing read before the first item is asked for
    name, tensor = next(stream)
    assert name == base.names[0] and isinstance(tensor, torch.Tensor)
    assert read_theta0 == [name]
    assert {n for _, n in read_tau} <= {name}
    rest = [n for n, _ in stream]
    assert [name, *rest] == base.names and read_theta0 == base.names
    assert sorted(read_tau) == sorted((k, n) for n in tv.names for k in ("sft", "rl"))


@pytest.mark.parametrize("coefs", [{"sft": 1.0}, {"sft": 1.0, "rl": 1.0, "dpo": 1.0}, {"sft": float("nan"), "rl": 1.0}])
def test_bad_coefficients_are_user_errors(cache, coefs):
    _, tv = cache
    with pytest.raises(DotsError):
        next(synthesize(tv, coefs))


# The stated tolerance of a synthesis on another device (or path) than the reference: float32 sums
# may round in another order (one float32 ulp of the sum), which a bf16 cast can move by one bf16 ulp.
ULP = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7}


def assert_within_one_ulp(got: torch.Tensor, ref: torch.Tensor) -> None:
    """`got` equals `ref` in dtype and shape, and each entry within one ulp of its dtype (relative to
    the larger magnitude), a tolerance that a synthesis gone wrong (a missing τ̃, a wrong λ) exceeds."""
    assert got.dtype == ref.dtype and got.shape == ref.shape
    torch.testing.assert_close(got.float(), ref.float(), rtol=ULP[ref.dtype], atol=1e-30)


def test_the_device_comparison_catches_a_wrong_synthesis(cache):
    """The comparison the CUDA test makes, through the CPU path: it passes on the same synthesis and
    fails on one with a slightly different λ, in both dtypes (so the CUDA test can fail)."""
    base, tv = cache
    lam = {"sft": 0.5, "rl": 1.5}
    ref = synthesize_dict(tv, lam, "cpu")
    for name, t in synthesize(tv, lam, "cpu"):
        assert_within_one_ulp(t, ref[name])
    wrong = synthesize_dict(tv, {"sft": 0.5, "rl": 1.6}, "cpu")
    with pytest.raises(AssertionError):
        for name in tv.names:
            assert_within_one_ulp(wrong[name], ref[name])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_matches_cpu(cache):
    """Every tensor synthesized on CUDA equals the CPU's within one ulp of its dtype (bf16 included)."""
    _, tv = cache
    lam = {"sft": 0.5, "rl": 1.5}
    cpu = synthesize_dict(tv, lam, "cpu")
    for name, t in synthesize(tv, lam, "cuda"):
        assert t.device.type == "cuda"
        assert_within_one_ulp(t.cpu(), cpu[name])
