"""The transformers engine: batched generation, prompt NLL, in-place swaps (docs/method.md §2, §4)."""

import math

import pytest
import torch
from engine_args import LAMBDA, TRIO_SOURCES
from helpers import greedy

from dots.engines import Engine
from dots.engines.factory import build_engine, resolve_engine_name
from dots.engines.hf import HFEngine
from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.options.engine import EngineOptions
from dots.paths import CONF_DIR
from dots.scoring import perplexity
from dots.scoring.perplexity import perplexity
from dots.scoring.sampling import Sampling
from dots.vectors.synth import synthesize

PROMPTS = ["12+34=", "What is 7*8? ", "abc", "The answer is \\boxed{"]


@pytest.fixture(scope="module")
def engine(trio):
    eng = HFEngine(trio.base, EngineOptions(device="cpu", batch_size=3, synth_cache="disk"), task_vectors=trio.tv)
    yield eng
    eng.close()


def test_is_an_engine(engine):
    assert isinstance(engine, Engine)


def test_batched_left_padded_generation_equals_one_by_one(engine):
    batched = greedy(engine, PROMPTS)
    single = [greedy(engine, [p])[0] for p in PROMPTS]
    assert batched == single
    assert all(len(r) == 1 and r[0] for r in batched)


def test_sampling_is_seeded_and_varied(engine):
    a = engine.generate(PROMPTS[:2], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=3))
    b = engine.generate(PROMPTS[:2], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=3))
    assert a == b
    assert [len(x) for x in a] == [4, 4]
    assert len(set(a[0])) > 1  # n distinct samples, not n copies
    assert engine.generate(PROMPTS[:1], Sampling(n=3, max_tokens=5)) == [[greedy(engine, PROMPTS[:1])[0][0][:5]] * 3]


def test_prompt_nll_matches_a_plain_forward_pass(engine):
    results = engine.prompt_nll(PROMPTS)
    tok = engine.tokenizer
    for text, res in zip(PROMPTS, results):
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(engine.model(ids).logits[0, :-1].float(), -1)
        ref = -logp.gather(-1, ids[0, 1:, None]).sum().item()
        assert res.tokens == ids.shape[1] - 1
        assert res.nll == pytest.approx(ref, rel=1e-5)
    ppl = perplexity(results)
    assert ppl == pytest.approx(math.exp(sum(r.nll for r in results) / sum(r.tokens for r in results)))
    assert perplexity(engine.prompt_nll(PROMPTS)) == pytest.approx(ppl)


def test_swap_equals_fresh_engine_on_saved_merge_and_swaps_back(engine, trio):
    before, nll_before = greedy(engine, PROMPTS), engine.prompt_nll(PROMPTS)
    fresh = HFEngine(trio.merged, EngineOptions(device="cpu"))
    expected, nll_expected = greedy(fresh, PROMPTS), fresh.prompt_nll(PROMPTS)
    fresh_state = fresh.state_dict()
    fresh.close()

    engine.swap_coefficients(LAMBDA)
    after = greedy(engine, PROMPTS)  # same prompts as before the swap: no stale answer
    assert after == expected and after != before
    assert [r.nll for r in engine.prompt_nll(PROMPTS)] == [r.nll for r in nll_expected]
    live = engine.state_dict()
    assert all(torch.equal(live[k], fresh_state[k]) for k in fresh_state)

    engine.swap_coefficients({"sft": 0.0, "rl": 0.0})  # back to θ0
    assert greedy(engine, PROMPTS) == before
    assert [r.nll for r in engine.prompt_nll(PROMPTS)] == [r.nll for r in nll_before]


def test_memory_synth_cache_swaps_to_the_same_model(engine, trio):
    engine.swap_coefficients(LAMBDA)
    expected = engine.state_dict()
    resident = HFEngine(trio.base, EngineOptions(device="cpu", synth_cache="memory"), task_vectors=trio.tv)
    resident.swap_coefficients({"sft": 2.0, "rl": 0.1})
    resident.swap_coefficients(LAMBDA)
    got = resident.state_dict()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert greedy(resident, PROMPTS) == greedy(engine, PROMPTS)
    resident.close()
    engine.swap_checkpoint(trio.base)
    with pytest.raises(DotsError, match="synth_cache"):
        HFEngine(trio.base, EngineOptions(device="cpu", synth_cache="gpu"))


def test_swap_checkpoint_and_weights(engine, trio):
    before = greedy(engine, PROMPTS)
    engine.swap_checkpoint(trio.merged)
    merged = greedy(engine, PROMPTS)
    assert merged != before
    engine.swap_weights(Checkpoint(trio.base).tensors())
    assert greedy(engine, PROMPTS) == before
    engine.swap_weights(synthesize(trio.tv, LAMBDA, device="cpu"))
    assert greedy(engine, PROMPTS) == merged
    engine.swap_checkpoint(trio.base)
    assert greedy(engine, PROMPTS) == before


def test_bad_swaps_are_user_errors(engine, trio, checkpoints):
    with pytest.raises(DotsError, match="not a tensor"):
        engine.swap_weights([("model.nope.weight", torch.zeros(2))])
    with pytest.raises(DotsError, match="shape"):
        engine.swap_weights([("lm_head.weight", torch.zeros(3, 3))])
    other = checkpoints({"hidden_size": 96, "num_heads": 3}).base
    with pytest.raises(DotsError, match="cannot swap"):
        engine.swap_checkpoint(other)
    with pytest.raises(DotsError, match="coefficients"):
        engine.swap_coefficients({"sft": 1.0})
    with pytest.raises(DotsError, match="task vectors"):
        HFEngine(trio.base, EngineOptions(device="cpu")).swap_coefficients(LAMBDA)


def test_tied_embeddings_swap(checkpoints):
    tied = checkpoints({"tie_word_embeddings": True}, ft={"seed": 4, "scale": 0.05})
    base, ft = tied.base, tied.sources["ft"]
    eng = HFEngine(base, EngineOptions(device="cpu"))
    before = greedy(eng, PROMPTS)
    eng.swap_checkpoint(ft)
    assert torch.equal(eng.model.lm_head.weight, Checkpoint(ft).get("model.embed_tokens.weight"))
    fresh = HFEngine(ft, EngineOptions(device="cpu"))
    assert greedy(eng, PROMPTS) == greedy(fresh, PROMPTS)
    eng.swap_checkpoint(base)
    assert greedy(eng, PROMPTS) == before


def test_factory_builds_hf_and_rejects_typos(trio):
    eng = build_engine({"name": "hf", "device": "cpu", "batch_size": 2, "dtype": "float32"}, trio.base, trio.tv)
    assert isinstance(eng, HFEngine) and eng.batch_size == 2
    eng.swap_coefficients(LAMBDA)
    eng.close()
    with pytest.raises(DotsError, match="unknown engine option"):
        build_engine({"name": "hf", "batch_sizes": 2}, trio.base)
    with pytest.raises(DotsError, match="unknown engine"):
        build_engine({"name": "tgi"}, trio.base)
    try:
        import vllm  # noqa: F401

        expected = "vllm"
    except ImportError:
        expected = "hf"
    assert resolve_engine_name("auto") == expected


def test_engine_config_files_build(trio):

    from omegaconf import OmegaConf

    conf = CONF_DIR / "engine"
    for name in ("auto", "vllm", "hf"):
        cfg = OmegaConf.load(conf / f"{name}.yaml")
        assert cfg.name == name
    cfg = OmegaConf.load(conf / "hf.yaml")
    cfg.device = "cpu"
    eng = build_engine(cfg, trio.base)
    assert isinstance(eng, HFEngine)
    eng.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_resident_form_gives_the_streamed_bytes_in_the_live_parameters(checkpoints, dtype):
    """A bf16 model with tied embeddings, τ̃ held dense, sparse, index and bitmask in turn: after each
    swap every parameter holds the streamed synthesis' bytes (θ0 + Σλτ̃ cast to bf16; then to
    the engine's float32). In the checkpoint's dtype the swap writes straight into the live
    parameters (same storage, no output buffers); in float32 it goes through outputs and a cast."""
    family = checkpoints({"dtype": torch.bfloat16, "tie_word_embeddings": True}, **TRIO_SOURCES)
    base, tv = Checkpoint(family.base), family.tv
    engine = HFEngine(base.path, EngineOptions(device="cpu", dtype=dtype, synth_cache="memory"), task_vectors=tv)
    try:
        live = {n: t.data_ptr() for n, t in engine._targets.items()}
        for form in ("dense", "sparse", "index", "bitmask"):
            engine.set_task_vectors(tv, resident_form=form)
            assert engine.resident_info()["form"] == form
            for lam in ({"sft": 2.0, "rl": -0.3}, LAMBDA, {"sft": 0.0, "rl": 1.1}):
                engine.swap_coefficients(lam)
                want = dict(synthesize(tv, lam, device="cpu"))
                got = engine.state_dict()
                for name, tensor in want.items():
                    ref = tensor.to(got[name].dtype)
                    assert torch.equal(got[name].view(-1).view(torch.uint8), ref.view(-1).view(torch.uint8)), name
            assert {n: t.data_ptr() for n, t in engine._targets.items()} == live
            # in place (no output buffers) where the dtypes agree, in every form
            in_place = dtype == "bfloat16"
            assert (engine._resident.out == {}) == in_place  # type: ignore[union-attr]
    finally:
        engine.close()
