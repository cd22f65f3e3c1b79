"""Compact τ̃ (cache version 2): the merged weights are bit-identical to the dense path's.

The reference here is the dense path as it was before the compact cache: τ⊙M straight from
`dots.vectors.sparsify.sparsify_source` (float32), γ applied with `mul_` when γ ≠ 1, then
acc = float32(θ0); acc.add_(τ̃_i, alpha=λ_i) for every λ_i ≠ 0 in source order; cast to the
base dtype; a source's added vocabulary rows appended. Every merged tensor of the compact
path (`synthesize`, `ResidentSynthesizer`, small blocks, `dots.merge method=dots_fixed`)
must equal it byte for byte, with τ̃ held in every resident form (dense, sparse, index, bitmask) and
written straight into live tensors — on the lab trio, generated bf16 / fp32 / mixed-dtype trios,
both scopes, every rescale, densities that pick each storage form, −0.0 entries in θ0, and
a source that adds vocabulary rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dots.errors import DotsError
from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.vectors.cache import CACHE_VERSION, TaskVectors, build_task_vectors, cache_key
from dots.vectors.compact import CompactTensor, encode, form_bytes, has_negative_zero
from dots.vectors.entry import CACHE_VERSION
from dots.vectors.forms import BY_SPEED
from dots.vectors.sparsify import SparseStats, SparsifyConfig, sparsify_source
from dots.vectors.synth import ResidentSynthesizer, synthesize

LAMBDAS = [{"a": 0.79, "b": 1.82}, {"a": -0.6, "b": 0.0}, {"a": 0.0, "b": -1.3}, {"a": 1.0, "b": 1.0}]
VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


def same_bytes(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (−0.0 ≠ +0.0, unlike torch.equal on floats)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return torch.equal(x.contiguous().reshape(-1).view(torch.uint8), y.contiguous().reshape(-1).view(torch.uint8))


def dense_taus(base: Checkpoint, sources: dict[str, Checkpoint], cfg: SparsifyConfig) -> dict[str, dict]:
    """τ̃ per source and tensor as the dense cache (version 1) returned it."""
    al = align(base, sources)
    out: dict[str, dict] = {}
    for key in sources:
        stats = SparseStats()
        sparse = {name: s for name, s in sparsify_source(al, key, cfg, stats)}
        for name, tensor in sparse.items():
            gamma = float(stats.tensor_gamma[name]) if cfg.rescale == "tensor" else float(stats.gamma(cfg.rescale))
            if gamma != 1.0:
                tensor.mul_(gamma)
        out[key] = sparse
    return out


def dense_merge(base: Checkpoint, sources: dict[str, Checkpoint], taus: dict[str, dict], lam: dict) -> dict:
    """θ0 + Σ λ_i τ̃_i with the dense path's arithmetic (whole tensors: the same bits as blocks)."""
    al = align(base, sources)
    out = {}
    for name in base.names:
        theta0 = base.get(name)
        if name not in al.merged:
            out[name] = theta0
            continue
        acc = theta0.to(torch.float32)
        for key, value in lam.items():
            if value != 0.0:
                acc.add_(taus[key][name], alpha=value)
        merged = acc.to(theta0.dtype)
        extra = al.extra_rows_tensor(name)
        if extra is not None:
            merged = torch.cat([merged, extra.to(theta0.dtype)])
        out[name] = merged
    return out


def check_bit_identity(
    base_dir: Path, sources_dirs: dict[str, Path], cfg: SparsifyConfig, cache: Path, lambdas=LAMBDAS
) -> TaskVectors:
    base = Checkpoint(base_dir)
    sources = {k: Checkpoint(v) for k, v in sources_dirs.items()}
    tv = build_task_vectors(base, sources, cfg, cache)
    taus = dense_taus(base, sources, cfg)
    residents = {form: ResidentSynthesizer(tv, device="cpu", form=form) for form in BY_SPEED}
    for i, lam in enumerate(lambdas):
        want = dense_merge(base, sources, taus, lam)
        streamed = dict(synthesize(tv, lam, device="cpu"))
        assert list(streamed) == list(want)
        for name, tensor in want.items():
            assert same_bytes(streamed[name], tensor), (name, lam)
        for form, resident in residents.items():  # every resident form, the same bytes
            held = {name: t.clone() for name, t in resident(lam)}
            assert list(held) == list(want)
            for name, tensor in want.items():
                assert same_bytes(held[name], tensor), (form, name, lam)
        # written straight into live tensors (NaN before: every entry must be written)
        live = {name: torch.full_like(t, float("nan")) for name, t in want.items()}
        assert list(residents[BY_SPEED[i % len(BY_SPEED)]](lam, into=live)) == []
        for name, tensor in want.items():
            assert same_bytes(live[name], tensor), (BY_SPEED[i % len(BY_SPEED)], "into", name, lam)
    for key in sources:  # τ̃ itself, rebuilt dense: equal values (zeros may differ in sign only)
        for name in tv.names:
            assert torch.equal(tv.get(key, name), taus[key][name]), (key, name)
    return tv


# --- trios -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trios(checkpoints):
    """The shipped lab trio and generated ones (a dense source `a`, a sparse `b`) in each dtype mix."""
    from dots.lab import ensure_trio

    def made(dtype: torch.dtype, source_dtype: torch.dtype | None = None) -> tuple[Path, dict[str, Path]]:
        a = {"seed": 1, "scale": 0.02, "dtype": source_dtype}
        family = checkpoints(
            {"dtype": dtype}, a=a, b={"seed": 2, "scale": 0.004, "density": 0.3, "dtype": source_dtype}
        )
        return family.base, family.sources

    lab = ensure_trio()
    return {
        "lab": (lab["base"], {"a": lab["sft"], "b": lab["rlvr"]}),
        "bf16": made(torch.bfloat16),
        "fp32": made(torch.float32),
        "bf16_base_fp32_sources": made(torch.bfloat16, torch.float32),
        "fp32_base_bf16_sources": made(torch.float32, torch.bfloat16),
    }


CONFIGS = [
    SparsifyConfig(density=d, scope=s, rescale=r)
    for d in (0.3, 1.0, 0.02)
    for s in ("tensor", "global")
    for r in ("global", "tensor", "none")
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"d{c.density}-{c.scope}-{c.rescale}")
def test_generated_bf16_trio_is_bit_identical(trios, tmp_path, cfg):
    tv = check_bit_identity(*trios["bf16"], cfg, tmp_path)
    forms = {v["form"] for e in tv.entries.values() for v in e.meta["tensors"].values()}
    expected = {0.3: "bitmask", 1.0: "full", 0.02: "index"}[cfg.density]
    assert expected in forms  # each density exercises its storage form


@pytest.mark.parametrize("trio", ["lab", "fp32", "bf16_base_fp32_sources", "fp32_base_bf16_sources"])
@pytest.mark.parametrize(
    "cfg",
    [
        SparsifyConfig(),
        SparsifyConfig(scope="global", rescale="tensor"),
        SparsifyConfig(density=0.02, rescale="none"),
        SparsifyConfig(density=1.0, scope="global", rescale="global"),
    ],
    ids=["d0.3-tensor-global", "d0.3-global-tensor", "d0.02-tensor-none", "d1.0-global-global"],
)
def test_other_trios_are_bit_identical(trios, tmp_path, trio, cfg):
    check_bit_identity(*trios[trio], cfg, tmp_path)


def test_small_blocks_are_bit_identical(trios, tmp_path, monkeypatch):
    """Blocks that do not start on a byte of the bitmask (7 entries) nor hold whole tensors."""
    import dots.vectors.synth

    monkeypatch.setattr(dots.vectors.synth, "CPU_BLOCK_ENTRIES", 7)
    for density in (0.3, 0.02):
        check_bit_identity(*trios["bf16"], SparsifyConfig(density=density), tmp_path / str(density), LAMBDAS[:2])


def test_negative_zeros_of_the_base_keep_the_dense_bits(trios, tmp_path):
    """θ0 = −0.0 where the sources are tiny negatives (masked out: the dense τ̃ holds −0.0
    there), −0.0 or +0.0, and θ0 = +0.0 where a source is −0.0: the merged sign of zero is the
    dense path's for every sign of λ (acc = −0 + λ·(±0) keeps −0 only if the term is −0)."""
    base, made = trios["bf16"]  # rewritten below
    ckpt = Checkpoint(base)
    gen = torch.Generator().manual_seed(3)
    shapes = {n: ckpt.info(n).shape for n in ckpt.names}
    u = {n: torch.rand(s, generator=gen) for n, s in shapes.items()}
    v = {n: torch.rand(s, generator=gen) for n, s in shapes.items()}
    neg, pos = {n: u[n] < 0.2 for n in shapes}, {n: (u[n] >= 0.2) & (u[n] < 0.3) for n in shapes}

    def rewrite(src: Path, out: Path, fill) -> Path:
        c = Checkpoint(src)
        with CheckpointWriter(out, {n: c.info(n) for n in c.names}) as writer:
            for name, tensor in c.tensors():
                writer.write(name, fill(name, tensor.clone()))
            writer.commit(copy_from=c)
        return out

    def put(t: torch.Tensor, where: torch.Tensor, value: float) -> torch.Tensor:
        return t.masked_fill_(where, value)

    rewrite(base, tmp_path / "base", lambda n, t: put(put(t, neg[n], -0.0), pos[n], 0.0))
    rewrite(
        made["a"],
        tmp_path / "a",
        lambda n, t: put(
            put(
                put(put(t, neg[n] & (v[n] < 0.3), -1e-30), neg[n] & (v[n] >= 0.3) & (v[n] < 0.5), -0.0),
                neg[n] & (v[n] >= 0.5) & (v[n] < 0.6),
                0.0,
            ),
            pos[n] & (v[n] < 0.5),
            -0.0,
        ),
    )
    rewrite(made["b"], tmp_path / "b", lambda n, t: put(t, neg[n] & (v[n] < 0.4), -1e-30))
    lambdas = LAMBDAS + [{"a": 1.0, "b": 0.0}, {"a": -1.0, "b": -1.0}, {"a": -1.0, "b": 1.0}]
    for cfg in (SparsifyConfig(), SparsifyConfig(density=0.02, scope="global"), SparsifyConfig(density=1.0)):
        tv = check_bit_identity(
            tmp_path / "base",
            {"a": tmp_path / "a", "b": tmp_path / "b"},
            cfg,
            tmp_path / f"cache-{cfg.density}",
            lambdas,
        )
        if cfg.density < 1:
            assert all(any(n + ".__negzero__" in e.weights for n in tv.names) for e in tv.entries.values())
            merged = dict(synthesize(tv, {"a": 1.0, "b": 1.0}, device="cpu"))
            assert any(bool((torch.signbit(t) & (t == 0)).any()) for t in merged.values())  # −0.0 survives


def test_added_vocabulary_rows_are_bit_identical(trios, tmp_path):
    """A source with 3 more embedding / lm_head rows: merged base rows, its rows appended."""
    base, made = trios["bf16"]
    plain = Checkpoint(made["a"])
    plan = {n: plain.info(n) for n in plain.names}
    for n in VOCAB:
        s = plain.info(n).shape
        plan[n] = TensorInfo((s[0] + 3, *s[1:]), plain.info(n).dtype)
    gen = torch.Generator().manual_seed(4)
    with CheckpointWriter(tmp_path / "a", plan) as writer:
        for name, tensor in plain.tensors():
            if name in VOCAB:
                tensor = torch.cat([tensor, torch.randn(3, tensor.shape[1], generator=gen).to(tensor.dtype)])
            writer.write(name, tensor)
        writer.commit(copy_from=plain)
    for cfg in (SparsifyConfig(), SparsifyConfig(density=0.02, scope="global", rescale="tensor")):
        tv = check_bit_identity(base, {"a": tmp_path / "a", "b": made["b"]}, cfg, tmp_path / f"c{cfg.density}")
        rows = Checkpoint(base).info("lm_head.weight").shape[0]
        for name in VOCAB:
            assert torch.equal(tv.extra_rows(name), Checkpoint(tmp_path / "a").get(name)[rows:])


def test_dots_fixed_merge_is_bit_identical(trios, tmp_path):
    from dots.merge.executor import merge_checkpoints

    base_dir, sources_dirs = trios["lab"]
    weights = {"a": 0.5, "b": 0.7071}
    out = merge_checkpoints(
        base_dir,
        sources_dirs,
        tmp_path / "out",
        method="dots_fixed",
        weights=weights,
        options={"density": 0.3, "scope": "global", "rescale": "tensor"},
        cache_dir=tmp_path / "cache",
    )
    base = Checkpoint(base_dir)
    sources = {k: Checkpoint(v) for k, v in sources_dirs.items()}
    want = dense_merge(base, sources, dense_taus(base, sources, SparsifyConfig(0.3, "global", "tensor")), weights)
    merged = Checkpoint(out)
    for name, tensor in want.items():
        assert same_bytes(merged.get(name), tensor), name


def test_merge_cli_dots_fixed_reads_the_compact_cache(trios, tmp_path):
    """`python -m dots.merge method=dots_fixed`: builds a version-2 (compact) τ̃ cache under
    cache_dir/taskvec and writes the dense path's merged bytes."""
    import os
    import subprocess
    import sys

    base_dir, sources_dirs = trios["bf16"]
    out, cache = tmp_path / "merged", tmp_path / "cache"
    env = {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "DOTS_OUTPUTS": str(tmp_path / "outputs"),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    args = [
        "method=dots_fixed",
        "method.scope=global",
        "method.rescale=tensor",
        f"backbone.base={base_dir}",
        *(f"+backbone.sources.{k}={v}" for k, v in sources_dirs.items()),
        "method.weights=[0.5,1.3]",
        f"output={out}",
        f"cache_dir={cache}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "dots.merge", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    metas = [json.loads(p.read_text()) for p in (cache / "taskvec").glob("*/taskvec.json")]
    assert len(metas) == 2 and all(m["version"] == CACHE_VERSION and m["format"] == "compact" for m in metas)
    base = Checkpoint(base_dir)
    sources = {k: Checkpoint(v) for k, v in sources_dirs.items()}
    cfg = SparsifyConfig(0.3, "global", "tensor")
    want = dense_merge(base, sources, dense_taus(base, sources, cfg), {"a": 0.5, "b": 1.3})
    merged = Checkpoint(out)
    for name, tensor in want.items():
        assert same_bytes(merged.get(name), tensor), name


# --- the format ----------------------------------------------------------------------------


def test_forms_and_bytes_per_parameter(trios, tmp_path):
    """bf16 at density 0.3: ≤ 0.75 bytes per parameter per source (bitmask 1/8 + 0.3 × 2)."""
    tv = build_task_vectors(
        Checkpoint(trios["lab"][0]), {k: Checkpoint(v) for k, v in trios["lab"][1].items()}, SparsifyConfig(), tmp_path
    )
    for entry in tv.entries.values():
        numel = entry.meta["numel"]
        stored = sum(entry.compact(n).nbytes for n in tv.names)
        assert stored / numel <= 0.75
        assert entry.nbytes / numel <= 0.75  # the file, header included
        assert entry.meta["version"] == CACHE_VERSION and entry.meta["format"] == "compact"
    assert form_bytes(1000, 300, 2) == {"bitmask": 125 + 600, "index": 300 * 6, "full": 2000}
    assert min(form_bytes(10_000, 100, 2).items(), key=lambda kv: kv[1])[0] == "index"


def test_encode_round_trip_and_checks():
    gen = torch.Generator().manual_seed(0)
    theta0 = torch.randn(1000, generator=gen).bfloat16()
    theta = (theta0.float() + 0.01 * torch.randn(1000, generator=gen)).bfloat16()
    tau = theta.float() - theta0.float()
    keep = tau.abs() >= tau.abs().quantile(0.7)
    sparse = tau * keep
    form, parts = encode(sparse, theta, theta0)
    assert form == "bitmask"
    ct = CompactTensor((1000,), form, parts[".__values__"], parts[".__where__"], gamma=1.0)
    assert torch.equal(ct.dense(theta0), sparse)
    with pytest.raises(DotsError, match="differs"):
        encode(sparse, theta0, theta0)  # θ_i that does not give τ⊙M
    with pytest.raises(DotsError, match="out of order"):
        blocks = ct.blocks()
        buf = torch.empty(1000)
        blocks.fill(buf[:10], theta0[10:20], 10, 20, torch.empty(10))


def test_an_old_cache_entry_is_rebuilt_not_misread(trios, tmp_path, caplog):
    base = Checkpoint(trios["bf16"][0])
    sources = {k: Checkpoint(v) for k, v in trios["bf16"][1].items()}
    cfg = SparsifyConfig()
    v1 = tmp_path / cache_key(base, sources["b"], cfg, version=1)  # where dots with cache version 1 put it
    v1.mkdir(parents=True)
    (v1 / "tau.safetensors").write_bytes(bytes(1000))
    stale = tmp_path / cache_key(base, sources["a"], cfg)  # same key, version-1 content
    stale.mkdir(parents=True)
    (stale / "taskvec.json").write_text(json.dumps({"version": 1, "rescale": "global", "gamma": 1.0}))
    (stale / "tau.safetensors").write_bytes(b"not a tensor file")
    with caplog.at_level("WARNING", logger="dots.vectors.cache"):
        tv = build_task_vectors(base, sources, cfg, tmp_path)
    assert f"version 1 remains at {v1}" in caplog.text and (v1 / "tau.safetensors").exists()  # told, not deleted
    assert tv.entries["a"].meta["version"] == CACHE_VERSION
    assert tv.entries["a"].path == stale and not (stale / "tau.safetensors").read_bytes().startswith(b"not")
    spec = tv.spec()
    (stale / "taskvec.json").write_text(json.dumps({**tv.entries["a"].meta, "version": 1}))
    with pytest.raises(DotsError, match="version 1"):
        TaskVectors.from_spec(spec)
    unversioned = {k: v for k, v in tv.entries["a"].meta.items() if k != "version"}
    (stale / "taskvec.json").write_text(json.dumps(unversioned))  # no version at all: refused, then rebuilt
    with pytest.raises(DotsError, match="version None"):
        TaskVectors.from_spec(spec)
    (stale / "tau.safetensors").write_bytes(b"not a tensor file")
    rebuilt = build_task_vectors(base, sources, cfg, tmp_path)
    assert rebuilt.entries["a"].meta["version"] == CACHE_VERSION
    assert not (stale / "tau.safetensors").read_bytes().startswith(b"not")


@pytest.mark.parametrize("step", [7, 64, 1000])
def test_off_cpu_bitmask_decoding_matches_numpys(step):
    """Off the CPU the bitmask is unpacked with torch (shifts, nonzero): forced here on CPU
    tensors, it rebuilds the very τ̃ of the numpy path, block by block."""
    gen = torch.Generator().manual_seed(1)
    theta0 = torch.randn(2003, generator=gen).bfloat16()
    theta = (theta0.float() + 0.01 * torch.randn(2003, generator=gen)).bfloat16()
    tau = theta.float() - theta0.float()
    sparse = tau * (torch.rand(2003, generator=gen) < 0.3)
    form, parts = encode(sparse, theta, theta0)
    ct = CompactTensor((2003,), form, parts[".__values__"], parts[".__where__"], gamma=1.25)
    host, device = ct.blocks(), ct.blocks()
    device._where_np = None
    base = theta0.float()
    for start in range(0, 2003, step):
        stop = min(start + step, 2003)
        a = host.fill(torch.empty(stop - start), base[start:stop], start, stop, torch.empty(step))
        b = device.fill(torch.empty(stop - start), base[start:stop], start, stop, torch.empty(step))
        assert same_bytes(a, b)
    assert torch.equal(ct.dense(theta0), sparse * 1.25)  # equal values; zeros may differ in sign only


@pytest.mark.parametrize(
    ("density", "noise", "form"), [(0.3, 0.01, "bitmask"), (0.005, 0.01, "index"), (1.0, 1.0, "full")]
)
@pytest.mark.parametrize("block", [8, 64, 1 << 24])
def test_kept_in_is_theta_i_at_the_kept_entries_and_theta0_elsewhere(monkeypatch, density, noise, form, block):
    """What a vLLM worker loads to find the kept entries in its own layout: where(M, θ_i, θ0),
    the bitmask unpacked a block at a time (blocks that end mid-tensor and a ragged tail)."""
    import dots.vectors.compact as compact

    monkeypatch.setattr(compact, "KEPT_IN_BLOCK", block)
    gen = torch.Generator().manual_seed(2)
    theta0 = torch.randn(40, 51, generator=gen).bfloat16()  # 2040 entries: not a multiple of 64
    theta = (theta0.float() + noise * torch.randn(40, 51, generator=gen)).bfloat16()
    tau = theta.float() - theta0.float()
    keep = (torch.rand(40, 51, generator=gen) < density) & (tau != 0)
    stored, parts = encode(tau * keep, theta, theta0)
    assert stored == form
    ct = CompactTensor((40, 51), form, parts[".__values__"], parts.get(".__where__"), gamma=1.0)
    expected = torch.where(keep, theta, theta0)
    copy = ct.kept_in(theta0)
    assert torch.equal(copy.view(torch.int16), expected.view(torch.int16))
    assert not torch.equal(theta0, expected)  # the default leaves θ0 alone
    mine = theta0.clone()
    assert ct.kept_in(mine, in_place=True) is mine
    assert torch.equal(mine.view(torch.int16), expected.view(torch.int16))


def test_every_resident_form_with_per_module_coefficients_and_its_size(trios, tmp_path):
    """λ per module group (attention, mlp, embed_head, norm): every resident form gives the
    streamed synthesis' bytes; at density 0.3 dense holds 4 bytes per parameter and source,
    sparse 8 per kept entry, bitmask the compact entry."""
    base_dir, sources_dirs = trios["bf16"]
    base = Checkpoint(base_dir)
    tv = build_task_vectors(base, {k: Checkpoint(v) for k, v in sources_dirs.items()}, SparsifyConfig(), tmp_path)
    per_group = {
        "a": {"attention": 0.3, "mlp": 1.7, "embed_head": -0.4, "norm": 0.0},
        "b": {"attention": 1.1, "mlp": 0.0, "embed_head": 0.9, "norm": 2.0},
    }
    want = dict(synthesize(tv, per_group, device="cpu"))
    sizes = {}
    for form in BY_SPEED:
        resident = ResidentSynthesizer(tv, device="cpu", form=form)
        got = {name: t.clone() for name, t in resident(per_group)}
        assert got.keys() == want.keys()
        for name, tensor in want.items():
            assert same_bytes(got[name], tensor), (form, name)
        sizes[form] = sum(t.nbytes for per in resident.taus.values() for t in per.values())
    numel = sum(base.info(n).numel for n in tv.names)
    kept = sum(int(e.meta["kept"]) for e in tv.entries.values())
    assert sizes["dense"] == 4 * numel * len(tv.sources)
    assert sizes["sparse"] == 8 * kept  # no −0.0 entries in this trio
    assert sizes["bitmask"] == sum(e.tau_bytes(tv.names) for e in tv.entries.values())
    itemsize = base.info(tv.names[0]).dtype.itemsize
    assert sizes["index"] == (4 + itemsize) * kept  # θ_i's values at int32 positions
    assert sizes["dense"] > sizes["sparse"] > sizes["index"] > sizes["bitmask"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_has_negative_zero_finds_only_negative_zeros(dtype):
    """The sign-bit compare agrees with (x == 0) & signbit(x): +0.0, negatives, −inf and NaN are
    not −0.0; contiguous or not, every float dtype."""
    values = torch.tensor([0.0, -1.0, 1.0, -float("inf"), float("nan"), -1e-3, 3.0, -2.5], dtype=dtype)
    assert not has_negative_zero(values)
    for at in (0, 5, 7):
        with_negative = values.clone()
        with_negative[at] = -0.0
        assert has_negative_zero(with_negative), at
        assert has_negative_zero(with_negative.view(2, 4).t()) and not has_negative_zero(values.view(2, 4).t())
