"""The streaming executor and `python -m dots.merge` on tiny generated checkpoints.

Merged tensors are compared with the dense references (docs/method.md) of test_methods applied to
weights read straight from the safetensors files; outputs are loaded and run in
transformers; every bad input is tried through the CLI in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import cli_env, run_cli
from safetensors.torch import load_file
from test_methods import ref_dare, ref_linear, ref_ram, ref_ram_lambdas, ref_sar, ref_task_arithmetic, ref_ties

from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.merge.executor import merge_checkpoints

REPO = Path(__file__).resolve().parent.parent


def load_state(path: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def merged_names(base: dict, sources: list[dict]) -> list[str]:
    return [n for n, t in base.items() if t.is_floating_point() and all(n in s for s in sources)]


def reference_delta(method: str, name: str, deltas: list[torch.Tensor], options: dict, lambdas=None):
    if method == "linear":
        return ref_linear(deltas, [1.0] * len(deltas))
    if method == "task_arithmetic":
        return ref_task_arithmetic(deltas, [1.0] * len(deltas), options.get("scale", 1.0))
    if method == "ties":
        return ref_ties(deltas, [1.0] * len(deltas), options.get("density", 0.2), options.get("scale", 1.0))
    if method == "dare":
        return ref_dare(
            name,
            deltas,
            [1.0] * len(deltas),
            options.get("p", 0.9),
            options.get("combine", "linear"),
            options.get("scale", 1.0),
        )
    if method in ("ram", "ram_plus"):
        return ref_ram(deltas, lambdas)
    raise AssertionError(method)


def assert_same_weights(actual: torch.Tensor, expected_f32: torch.Tensor, dtype: torch.dtype, name: str):
    assert actual.dtype == dtype, name
    if dtype == torch.float32:
        torch.testing.assert_close(actual, expected_f32, rtol=1e-5, atol=1e-6, msg=name)
    else:  # the reference is rounded to bf16 too; allow one rounding step of difference
        torch.testing.assert_close(actual.float(), expected_f32.to(dtype).float(), rtol=2**-7, atol=1e-6, msg=name)


CASES = [
    ("linear", {}),
    ("task_arithmetic", {"scale": 0.7}),
    ("ties", {"density": 0.2}),
    ("dare", {"p": 0.5, "combine": "ties"}),
    ("ram", {}),
    ("ram_plus", {}),
]


@pytest.mark.parametrize("family", ["qwen_bf16", "llama_fp32_tied_sharded", "qwen_fp32_bf16_sources"])
@pytest.mark.parametrize("method,options", CASES, ids=[c[0] for c in CASES])
def test_merge_matches_dense_reference(tiny_family, tmp_path, family, method, options):
    fam = tiny_family(family)
    out = merge_checkpoints(fam.base, fam.sources, tmp_path / "out", method=method, options=options)
    base = load_state(fam.base)
    sources = [load_state(p) for p in fam.sources.values()]
    merged = load_state(out)
    assert set(merged) == set(base)
    names = merged_names(base, sources)
    deltas = {n: [s[n].float() - base[n].float() for s in sources] for n in names}
    lambdas = [1.0, 1.0]
    if method == "ram_plus":  # ρ over the whole model
        flat = [torch.cat([deltas[n][i].reshape(-1) for n in names]) for i in range(2)]
        lambdas = ref_ram_lambdas(flat, 0.1, 2.0)
    for name in names:
        expected = base[name].float() + reference_delta(method, name, deltas[name], options, lambdas)
        assert_same_weights(merged[name], expected, base[name].dtype, name)
    config = json.loads((out / "config.json").read_text())
    assert config.get("tie_word_embeddings", False) == fam.tied


def test_sar_merge_with_cached_fisher(qwen_bf16, tmp_path):
    options = {"calibration_size": 4, "p": 0.2}
    cache = tmp_path / "cache"
    out = merge_checkpoints(
        qwen_bf16.base, qwen_bf16.sources, tmp_path / "out", method="sar", options=options, cache_dir=cache
    )
    files = sorted((cache / "fisher").glob("*.safetensors"))
    assert len(files) == 2
    stamps = [f.stat().st_mtime_ns for f in files]
    again = merge_checkpoints(
        qwen_bf16.base, qwen_bf16.sources, tmp_path / "again", method="sar", options=options, cache_dir=cache
    )
    assert [f.stat().st_mtime_ns for f in files] == stamps  # reused, not recomputed
    assert load_state(out).keys() == load_state(again).keys()
    # which cache file belongs to which source: recompute the keys
    from dots.merge.calibration import builtin_calibration
    from dots.merge.fisher import fisher_key

    examples = builtin_calibration(4, 0)
    fisher = [
        load_file(str(cache / "fisher" / f"{fisher_key(Checkpoint(p), examples, 256, torch.float32)}.safetensors"))
        for p in qwen_bf16.sources.values()
    ]
    base = load_state(qwen_bf16.base)
    sources = [load_state(p) for p in qwen_bf16.sources.values()]
    merged = load_state(out)
    for name in merged_names(base, sources):
        a, b = (s[name].float() - base[name].float() for s in sources)
        expected = base[name].float() + ref_sar(name, a, b, fisher[0][name], fisher[1][name], 0.2, 1.0)
        assert_same_weights(merged[name], expected, base[name].dtype, name)
    again_state = load_state(again)
    assert all(torch.equal(merged[n], again_state[n]) for n in merged)


def test_dots_fixed_is_the_synthesiser_bit_for_bit(llama_fp32_tied, tmp_path):
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig
    from dots.vectors.synth import synthesize

    weights = {"sft": 0.5, "rlvr": 0.7071}
    out = merge_checkpoints(
        llama_fp32_tied.base,
        llama_fp32_tied.sources,
        tmp_path / "out",
        method="dots_fixed",
        weights=weights,
        cache_dir=tmp_path / "cache",
    )
    tv = build_task_vectors(
        Checkpoint(llama_fp32_tied.base),
        {k: Checkpoint(v) for k, v in llama_fp32_tied.sources.items()},
        SparsifyConfig(),
        tmp_path / "cache" / "taskvec",
    )
    merged = load_state(out)
    for name, tensor in synthesize(tv, weights, device="cpu"):
        assert torch.equal(merged[name], tensor), name


@pytest.mark.parametrize(
    "method", ["linear", "task_arithmetic", "ties", "dare_linear", "dare_ties", "ram", "ram_plus", "dots_fixed"]
)
def test_merged_model_loads_and_generates(qwen_bf16, tmp_path, method):
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dots.paths import CONF_DIR

    cfg = yaml.safe_load((CONF_DIR / "method" / f"{method}.yaml").read_text())
    name = cfg.pop("name")
    weights = cfg.pop("weights", None)
    out = merge_checkpoints(
        qwen_bf16.base,
        qwen_bf16.sources,
        tmp_path / "m",
        method=name,
        options=cfg,
        weights=weights,
        cache_dir=tmp_path / "cache",
    )
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert next(model.parameters()).dtype == torch.bfloat16
    state = load_state(out)
    for pname, param in model.named_parameters():
        assert torch.equal(param.detach(), state[pname]), pname
    ids = tok("12+34=", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == ids.shape[1] + 4 or int(generated[0, -1]) == tok.eos_token_id
    card = (out / "README.md").read_text()
    import dots

    assert f"`{name}`" in card and dots.__version__ in card and str(qwen_bf16.sources["rlvr"]) in card
    from huggingface_hub import ModelCard

    data = ModelCard.load(out / "README.md").data
    assert sorted(data.tags) == sorted({"dots", "merge", name})  # each tag once
    assert data.base_model is None  # local directories are not Hub ids


def test_tied_family_generates(llama_fp32_tied, tmp_path):
    from transformers import AutoModelForCausalLM

    out = merge_checkpoints(llama_fp32_tied.base, llama_fp32_tied.sources, tmp_path / "m", method="ties")
    assert len(list(out.glob("*.safetensors"))) == 1  # 5 GiB shard limit: one file for a tiny model
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.tie_word_embeddings
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_sharded_output(qwen_bf16, tmp_path):
    out = merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "m", method="linear", max_shard_bytes=30_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)


def test_extra_vocab_rows_come_from_the_source(qwen_bf16, tmp_path):
    """A source with 3 added tokens: its extra embedding/lm_head rows are appended."""
    src = Checkpoint(qwen_bf16.sources["sft"])
    plan = {}
    for n in src.names:
        info = src.info(n)
        grow = n in ("model.embed_tokens.weight", "lm_head.weight")
        plan[n] = TensorInfo((info.shape[0] + 3, *info.shape[1:]) if grow else info.shape, info.dtype)
    extra = {}
    with CheckpointWriter(tmp_path / "grown", plan) as writer:
        for n in src.names:
            t = src.get(n)
            if plan[n].shape != t.shape:
                extra[n] = torch.randn(3, t.shape[1]).to(t.dtype)
                t = torch.cat([t, extra[n]])
            writer.write(n, t)
        grown = src.info("model.embed_tokens.weight").shape[0] + 3  # the config says so (vocab resized)
        writer.add_file("config.json", json.dumps({**src.config, "vocab_size": grown}))
        writer.commit(copy_from=src)
    out = merge_checkpoints(
        qwen_bf16.base,
        {"sft": tmp_path / "grown", "rlvr": qwen_bf16.sources["rlvr"]},
        tmp_path / "m",
        method="task_arithmetic",
    )
    merged = load_state(out)
    for n, rows in extra.items():
        assert torch.equal(merged[n][-3:], rows)
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == merged["model.embed_tokens.weight"].shape[0]


@pytest.mark.parametrize(
    "method,options",
    CASES + [("dare", {"p": 0.5}), ("ram_plus", {"scope": "tensor"})],
    ids=[c[0] for c in CASES] + ["dare-linear", "ram_plus-tensor"],
)
def test_row_blocked_merge_writes_the_same_bytes(qwen_bf16, tmp_path, method, options):
    """block_entries=100 splits every matrix (the embedding into blocks of one or two rows) and
    the output files come out byte-identical to the whole-tensor merge."""
    whole = merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "whole", method=method, options=options)
    blocked = merge_checkpoints(
        qwen_bf16.base, qwen_bf16.sources, tmp_path / "blocked", method=method, options=options, block_entries=100
    )
    files = sorted(p.name for p in whole.glob("*.safetensors"))
    assert files and files == sorted(p.name for p in blocked.glob("*.safetensors"))
    for name in files:
        assert (whole / name).read_bytes() == (blocked / name).read_bytes(), name


FIRST_PASS_CASES = [("sar", {"calibration_size": 2, "p": 0.2}), ("dots_fixed", {})]


@pytest.mark.parametrize("method,options", FIRST_PASS_CASES, ids=[c[0] for c in FIRST_PASS_CASES])
def test_row_blocked_merge_with_a_first_pass_writes_the_same_bytes(qwen_bf16, tmp_path, method, options):
    """SAR (median of the private |r| found over the blocks, Fisher and drop masks read per
    block) and dots_fixed (τ̃ rows read per block) merge in row blocks with the same bytes."""
    cache = tmp_path / "cache"
    whole = merge_checkpoints(
        qwen_bf16.base, qwen_bf16.sources, tmp_path / "whole", method=method, options=options, cache_dir=cache
    )
    blocked = merge_checkpoints(
        qwen_bf16.base,
        qwen_bf16.sources,
        tmp_path / "blocked",
        method=method,
        options=options,
        cache_dir=cache,
        block_entries=100,
    )
    files = sorted(p.name for p in whole.glob("*.safetensors"))
    assert files and files == sorted(p.name for p in blocked.glob("*.safetensors"))
    for name in files:
        assert (whole / name).read_bytes() == (blocked / name).read_bytes(), name


ALL_CASES = CASES + FIRST_PASS_CASES


@pytest.mark.parametrize("method,options", ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_every_method_gets_exactly_its_declared_inputs_one_row_block_at_a_time(
    qwen_bf16, tmp_path, monkeypatch, method, options
):
    """The executor hands each method's merge function and passes exactly the inputs their
    parameters name. And the resident set of a merge is a few blocks whatever the width: no
    blockwise method is handed a tensor above block_entries (one row where a row is larger).
    Before SAR was blockwise it got whole tensors — 6-7 float32 copies of a 545 M-entry 7B
    embedding, ≥ 13 GiB, stopped by benchmarks/scale/large.py's memory guard. (dots_fixed
    merges whole tensors: its compact τ̃ is rebuilt against a whole θ0 tensor.)"""
    import dataclasses

    from dots.merge.methods import registry
    from dots.merge.methods.declare import Declared

    spec = registry.get_method(method)
    seen: list[int] = []
    passed: dict[str, set[frozenset[str]]] = {}

    def spied(role: str, declared: Declared | None) -> Declared | None:
        if declared is None:
            return None

        def spy(**inputs):
            passed.setdefault(role, set()).add(frozenset(inputs))
            if role == "merge":
                seen.append(next(iter(inputs.get("deltas") or [inputs.get("base")])).numel())
            return declared.fn(**inputs)

        return Declared(spy, declared.inputs)

    roles = ("merge", "first_pass", "tensor_pass")
    monkeypatch.setitem(
        registry.METHODS, spec.name, dataclasses.replace(spec, **{r: spied(r, getattr(spec, r)) for r in roles})
    )
    block = 100
    merge_checkpoints(
        qwen_bf16.base,
        qwen_bf16.sources,
        tmp_path / "out",
        method=method,
        options=options,
        cache_dir=tmp_path / "cache",
        block_entries=block,
    )
    declared = {r: {frozenset(getattr(spec, r).inputs)} for r in roles if getattr(spec, r) is not None}
    assert passed == declared
    widest_row = max(Checkpoint(qwen_bf16.base).info(n).shape[-1] for n in Checkpoint(qwen_bf16.base).names)
    assert seen and (max(seen) <= max(block, widest_row)) == spec.blockwise


def test_row_blocked_merge_appends_extra_vocab_rows(qwen_bf16, tmp_path):
    src = Checkpoint(qwen_bf16.sources["sft"])
    plan = {
        n: TensorInfo(
            (src.info(n).shape[0] + 2, *src.info(n).shape[1:])
            if n == "model.embed_tokens.weight"
            else src.info(n).shape,
            src.info(n).dtype,
        )
        for n in src.names
    }
    with CheckpointWriter(tmp_path / "grown", plan) as writer:
        for n in src.names:
            t = src.get(n)
            writer.write(n, torch.cat([t, torch.ones(2, t.shape[1], dtype=t.dtype)]) if plan[n].shape != t.shape else t)
        grown = src.info("model.embed_tokens.weight").shape[0] + 2  # the config says so (vocab resized)
        writer.add_file("config.json", json.dumps({**src.config, "vocab_size": grown}))
        writer.commit(copy_from=src)
    sources = {"sft": tmp_path / "grown", "rlvr": qwen_bf16.sources["rlvr"]}
    whole = load_state(merge_checkpoints(qwen_bf16.base, sources, tmp_path / "whole", method="ties"))
    blocked = load_state(
        merge_checkpoints(qwen_bf16.base, sources, tmp_path / "blocked", method="ties", block_entries=100)
    )
    assert blocked.keys() == whole.keys() and all(torch.equal(blocked[n], whole[n]) for n in whole)
    assert torch.equal(
        blocked["model.embed_tokens.weight"][-2:],
        torch.ones(2, whole["model.embed_tokens.weight"].shape[1], dtype=torch.bfloat16),
    )


# --- the CLI ------------------------------------------------------------------------------


def merge_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m dots.merge args…` run in tmp_path, its outputs under tmp_path/outputs."""
    return run_cli("dots.merge", *args, cwd=tmp_path, env=cli_env(tmp_path / "outputs"), timeout=300)


def family_args(fam, keys=("sft", "rlvr")) -> list[str]:
    return [f"backbone.base={fam.base}", *(f"+backbone.sources.{k}={fam.sources[k]}" for k in keys)]


def test_cli_merges_as_documented(qwen_bf16, tmp_path):
    out = tmp_path / "merged"
    proc = merge_cli(tmp_path, "method=ties", *family_args(qwen_bf16), f"output={out}")
    assert proc.returncode == 0, proc.stderr
    assert "ties" in (out / "README.md").read_text()
    expected = merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "api", method="ties")
    a, b = load_state(out), load_state(expected)
    assert all(torch.equal(a[n], b[n]) for n in b)
    # an existing output is replaced only with overwrite=true
    proc = merge_cli(tmp_path, "method=linear", *family_args(qwen_bf16), f"output={out}", "overwrite=true")
    assert proc.returncode == 0, proc.stderr
    assert "`linear`" in (out / "README.md").read_text()


def test_cli_dare_is_identical_across_runs(qwen_bf16, tmp_path):
    for out in ("one", "two"):
        proc = merge_cli(
            tmp_path, "method=dare_ties", "method.p=0.3", *family_args(qwen_bf16), f"output={tmp_path / out}"
        )
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "one" / "model.safetensors").read_bytes() == (
        tmp_path / "two" / "model.safetensors"
    ).read_bytes()


def _copy_with(src: Path, out: Path, drop: str | None = None, poison: str | None = None) -> Path:
    ckpt = Checkpoint(src)
    plan = {n: ckpt.info(n) for n in ckpt.names if n != drop}
    with CheckpointWriter(out, plan) as writer:
        for n in plan:
            t = ckpt.get(n)
            if n == poison:
                t = t.clone()
                t.view(-1)[0] = float("nan")
            writer.write(n, t)
        writer.commit(copy_from=ckpt)
    return out


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory, checkpoints, qwen_bf16, llama_fp32_tied):
    root = tmp_path_factory.mktemp("bad")
    (root / "not_a_model").mkdir()
    (root / "not_a_model" / "notes.txt").write_text("hello")
    wider = checkpoints({"dtype": torch.bfloat16, "hidden_size": 96, "num_heads": 2}).base
    last = Checkpoint(qwen_bf16.base).names[-1]
    return {
        "not_a_model": root / "not_a_model",
        "wider": wider,
        "lacking": _copy_with(qwen_bf16.sources["sft"], root / "lacking", drop="model.norm.weight"),
        "nan": _copy_with(qwen_bf16.sources["rlvr"], root / "nan", poison=last),
        "llama": llama_fp32_tied.sources["sft"],
    }


BAD = {
    "missing_path": (
        lambda f, b: [
            f"backbone.base={f.base}",
            "+backbone.sources.sft=/nonexistent/model",
            f"+backbone.sources.rlvr={f.sources['rlvr']}",
        ],
        "does not exist",
    ),
    "not_a_model": (
        lambda f, b: [
            f"backbone.base={f.base}",
            f"+backbone.sources.sft={b['not_a_model']}",
            f"+backbone.sources.rlvr={f.sources['rlvr']}",
        ],
        "not a model",
    ),
    "architecture": (
        lambda f, b: [
            f"backbone.base={f.base}",
            f"+backbone.sources.sft={b['llama']}",
            f"+backbone.sources.rlvr={f.sources['rlvr']}",
        ],
        "architectures differ",
    ),
    "shape": (
        lambda f, b: [
            f"backbone.base={f.base}",
            f"+backbone.sources.sft={b['wider']}",
            f"+backbone.sources.rlvr={f.sources['rlvr']}",
        ],
        "shapes differ",
    ),
    "lacking_tensor": (
        lambda f, b: [
            f"backbone.base={f.base}",
            f"+backbone.sources.sft={b['lacking']}",
            f"+backbone.sources.rlvr={f.sources['rlvr']}",
        ],
        "lacks tensor model.norm.weight",
    ),
    "nan": (
        lambda f, b: [
            f"backbone.base={f.base}",
            f"+backbone.sources.sft={f.sources['sft']}",
            f"+backbone.sources.rlvr={b['nan']}",
        ],
        "NaN/Inf",
    ),
    "density": (lambda f, b: family_args(f) + ["method.density=0"], "density must be in \\(0, 1\\]"),
    "density_high": (lambda f, b: family_args(f) + ["method.density=1.2"], "density must be in \\(0, 1\\]"),
    "unknown_method": (lambda f, b: family_args(f) + ["method=nope"], "unknown method 'nope'"),
    "unknown_method_name": (lambda f, b: family_args(f) + ["method.name=nope"], "unknown merge method 'nope'"),
    "sar_three": (
        lambda f, b: family_args(f) + ["method=sar", f"+backbone.sources.third={f.sources['sft']}"],
        "exactly 2 sources",
    ),
    "sar_one": (lambda f, b: family_args(f, keys=("sft",)) + ["method=sar"], "exactly 2 sources"),
    "block_entries": (lambda f, b: family_args(f) + ["block_entries=0"], r"block_entries must be (an integer )?>= 1"),
    "block_entries_text": (
        lambda f, b: family_args(f) + ["block_entries=many"],
        r"block_entries must be (an integer )?>= 1",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_cli_bad_input_is_one_line_and_leaves_nothing(qwen_bf16, bad_inputs, tmp_path, case):
    make_args, message = BAD[case]
    out = tmp_path / "merged"
    proc = merge_cli(tmp_path, *make_args(qwen_bf16, bad_inputs), f"output={out}")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), proc.stderr
    import re

    assert re.search(message, errors[0]), errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".merged.*"))  # no temporary directory left behind


def test_cli_existing_output_needs_overwrite(qwen_bf16, tmp_path):
    """A previous merge output is replaced only with overwrite=true; a directory holding a file
    dots did not write never is, overwrite or not (tests/test_data_safety.py has the rest)."""
    out = merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "merged", method="linear")
    proc = merge_cli(tmp_path, "method=ties", *family_args(qwen_bf16), f"output={out}")
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "output exists" in errors[0] and "overwrite=true" in errors[0]
    (out / "keep.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    proc = merge_cli(tmp_path, "method=ties", *family_args(qwen_bf16), f"output={out}", "overwrite=true")
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1 and "keep.txt" in errors[0], proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before and (out / "keep.txt").read_text() == "mine"


def test_nan_found_after_writing_began_leaves_nothing(qwen_bf16, bad_inputs, tmp_path):
    """The poisoned tensor is the last one: the writer has written others and must abort."""
    from dots.errors import DotsError

    with pytest.raises(DotsError, match="NaN/Inf"):
        merge_checkpoints(
            qwen_bf16.base,
            {"sft": qwen_bf16.sources["sft"], "rlvr": bad_inputs["nan"]},
            tmp_path / "out",
            method="ties",
        )
    assert list(tmp_path.iterdir()) == []
