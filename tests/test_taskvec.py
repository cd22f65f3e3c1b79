"""docs/method.md §1 on real checkpoints: top-k masks, norm-preserving rescale, cache reuse, alignment."""

import json

import pytest
import torch

from dots.errors import DotsError
from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.vectors.cache import build_task_vectors
from dots.vectors.masks import topk_mask
from dots.vectors.sparsify import SparsifyConfig
from dots.vectors.topk import global_kth_largest


@pytest.fixture(scope="module")
def mixed(checkpoints):
    """A bf16 base, an fp32 source `a` and a bf16 source `b` (scale 0.002: many exact ties)."""
    family = checkpoints(
        {"dtype": torch.bfloat16}, a={"seed": 1, "dtype": torch.float32}, b={"seed": 2, "scale": 0.002}
    )
    return Checkpoint(family.base), {k: Checkpoint(p) for k, p in family.sources.items()}


def reference(base, source, names, cfg):
    """Dense docs/method.md §1 computed on the concatenated vector."""
    taus = {n: source.get(n).float() - base.get(n).float() for n in names}
    flat = torch.cat([t.reshape(-1) for t in taus.values()])
    masks, offset = {}, 0
    if cfg.scope == "global":
        m = topk_mask(flat.abs(), round(cfg.density * flat.numel()))
        for n, t in taus.items():
            masks[n] = m[offset : offset + t.numel()].reshape(t.shape)
            offset += t.numel()
    else:
        masks = {n: topk_mask(t.abs(), round(cfg.density * t.numel())) for n, t in taus.items()}
    kept = torch.cat([(t * masks[n]).reshape(-1) for n, t in taus.items()])
    out = {}
    for n, t in taus.items():
        r = t * masks[n]
        if cfg.rescale == "global":
            r = r * flat.norm() / (kept.norm() + 1e-8)
        elif cfg.rescale == "tensor":
            r = r * t.norm() / ((t * masks[n]).norm() + 1e-8)
        out[n] = r
    return out


@pytest.mark.parametrize(
    "cfg",
    [
        SparsifyConfig(),
        SparsifyConfig(scope="global"),
        SparsifyConfig(rescale="tensor"),
        SparsifyConfig(density=0.1, scope="global", rescale="none"),
        SparsifyConfig(density=1.0, rescale="none"),
    ],
)
def test_sparsified_vectors_match_dense_formula(mixed, tmp_path, cfg):
    base, sources = mixed
    tv = build_task_vectors(base, sources, cfg, tmp_path)
    for key, src in sources.items():
        ref = reference(base, src, tv.names, cfg)
        total = sum(r.numel() for r in ref.values())
        nonzero = sum(int((tv.get(key, n) != 0).sum()) for n in tv.names)
        if cfg.density < 1:
            assert nonzero == round(cfg.density * total) or cfg.scope == "tensor"
        for n in tv.names:
            torch.testing.assert_close(tv.get(key, n), ref[n], rtol=1e-5, atol=1e-7)


def test_global_rescale_preserves_norm(mixed, tmp_path):
    base, sources = mixed
    tv = build_task_vectors(base, sources, SparsifyConfig(density=0.2), tmp_path)
    for key, src in sources.items():
        dense = torch.cat([(src.get(n).float() - base.get(n).float()).reshape(-1) for n in tv.names]).norm()
        sparse = torch.cat([tv.get(key, n).reshape(-1) for n in tv.names]).norm()
        assert abs(float(sparse) / float(dense) - 1) < 1e-4


def test_cache_is_reused_and_keyed_by_options(mixed, tmp_path):
    base, sources = mixed
    tv1 = build_task_vectors(base, sources, SparsifyConfig(), tmp_path)
    stamp = {k: (v.path / "taskvec.json").stat().st_mtime_ns for k, v in tv1.entries.items()}
    tv2 = build_task_vectors(base, sources, SparsifyConfig(), tmp_path)
    assert {k: v.path for k, v in tv2.entries.items()} == {k: v.path for k, v in tv1.entries.items()}
    assert stamp == {k: (v.path / "taskvec.json").stat().st_mtime_ns for k, v in tv2.entries.items()}
    tv3 = build_task_vectors(base, sources, SparsifyConfig(density=0.5), tmp_path)
    assert tv3.entries["a"].path != tv1.entries["a"].path
    # a source alone reuses its entry built with a partner
    tv4 = build_task_vectors(base, {"a": sources["a"]}, SparsifyConfig(), tmp_path)
    assert tv4.entries["a"].path == tv1.entries["a"].path
    # reopened from a spec (what a vLLM worker does)
    again = type(tv1).from_spec(json.loads(json.dumps(tv1.spec())))
    assert torch.equal(again.get("b", tv1.names[0]), tv1.get("b", tv1.names[0]))


def test_sparsify_holds_one_float32_copy_of_a_large_tensor(tmp_path, monkeypatch):
    """τ̃ of a large tensor: τ is read in row blocks, the norms are summed in float64 chunk by
    chunk and the mask found and applied in place, so building it holds τ, its mask and
    chunk-sized temporaries — not θ0, θ_i, |τ|, a float mask and float64 copies of it whole
    (6 float32 copies here; a dots_fixed merge of a 2-layer Qwen2.5-7B-shaped trio reached
    13 GiB, its 545 M-entry embedding's τ̃ build)."""
    import dots.vectors.deltas
    from dots.testing import peak_cpu_alloc_bytes
    from dots.vectors.sparsify import SparseStats, sparsify_source

    monkeypatch.setattr(dots.vectors.deltas, "BLOCK_ENTRIES", 1 << 20)  # τ read in 16 row blocks
    shape = (4096, 4096)  # 16.8 M entries: 4 chunks of dots.vectors.topk.CHUNK
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(shape, generator=gen).to(torch.bfloat16)
    for key, t in (("base", base), ("sft", (base.float() + 0.01 * torch.randn(shape, generator=gen)).bfloat16())):
        with CheckpointWriter(tmp_path / key, {"w": TensorInfo(shape, torch.bfloat16)}) as writer:
            writer.write("w", t)
            writer.add_file("config.json", json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
            writer.commit()
    al = align(Checkpoint(tmp_path / "base"), {"sft": Checkpoint(tmp_path / "sft")})
    out = {}
    peak = peak_cpu_alloc_bytes(lambda: out.update(sparsify_source(al, "sft", SparsifyConfig(), SparseStats())))
    fp32 = 4 * base.numel()
    assert peak < 2.5 * fp32, peak / fp32  # before: 6.0 (θ0, θ_i, τ, |τ|, a float mask, float64 copies)
    tau = base.float()  # the same values as the whole-tensor formula
    tau = Checkpoint(tmp_path / "sft").get("w").float() - tau
    expected = tau * topk_mask(tau.abs(), round(0.3 * tau.numel()))
    assert torch.equal(out["w"].view(torch.int32), expected.view(torch.int32))


def test_global_kth_largest_is_exact():
    gen = torch.Generator().manual_seed(0)
    parts = [torch.randn(1000, generator=gen), torch.randn(37, 5, generator=gen).half().float(), torch.zeros(9)]
    flat = torch.cat([p.reshape(-1) for p in parts]).abs()
    for k in (1, 10, 500, 1185, flat.numel()):
        thr, ties = global_kth_largest(lambda: iter(parts), k)
        assert thr == flat.topk(k).values.min().item()
        assert int((flat > thr).sum()) + ties == k


def test_topk_mask_keeps_exactly_k_with_ties():
    x = torch.tensor([1.0, 2.0, 2.0, 2.0, 0.5])
    m = topk_mask(x, 2)
    assert m.tolist() == [False, True, True, False, False]


def test_bad_density_is_rejected():
    for d in (0.0, -0.1, 1.5):
        with pytest.raises(DotsError, match="density"):
            SparsifyConfig(density=d)


def test_alignment_rules(checkpoints, tmp_path):
    base = checkpoints({"tie_word_embeddings": False}).base
    llama = checkpoints({"arch": "llama"}).base
    with pytest.raises(DotsError, match="architectures differ"):
        align(Checkpoint(base), {"x": Checkpoint(llama)})
    wide = checkpoints({"hidden_size": 96, "num_heads": 3}).base
    with pytest.raises(DotsError, match="shapes differ"):
        align(Checkpoint(base), {"x": Checkpoint(wide)})
    # a source missing a tensor
    ck = Checkpoint(base)
    plan = {n: ck.info(n) for n in ck.names if "layers.1.mlp" not in n}
    with CheckpointWriter(tmp_path / "partial", plan) as w:
        w.write_all(ck.tensors(plan))
        w.commit(copy_from=ck)
    with pytest.raises(DotsError, match="lacks tensor"):
        align(ck, {"x": Checkpoint(tmp_path / "partial")})
    # extra vocabulary rows in a source: merged over base rows, extra rows kept
    plan = {n: ck.info(n) for n in ck.names}
    for n in ("model.embed_tokens.weight", "lm_head.weight"):
        s = ck.info(n).shape
        plan[n] = TensorInfo((s[0] + 3, *s[1:]), ck.info(n).dtype)
    with CheckpointWriter(tmp_path / "grown", plan) as w:
        for n, t in ck.tensors():
            if n in ("model.embed_tokens.weight", "lm_head.weight"):
                t = torch.cat([t, torch.full((3, t.shape[1]), 7.0)])
            w.write(n, t)
        w.commit(copy_from=ck)
    al = align(ck, {"x": Checkpoint(tmp_path / "grown")})
    assert al.out_plan["lm_head.weight"].shape[0] == ck.info("lm_head.weight").shape[0] + 3
    assert torch.equal(al.extra_rows_tensor("lm_head.weight"), torch.full((3, 64), 7.0))
    assert al.output_config()["vocab_size"] == ck.info("lm_head.weight").shape[0] + 3
