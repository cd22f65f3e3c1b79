"""docs/method.md §6 task-vector analysis: every metric recovers structure planted in generated
checkpoints (sparsity, sign conflicts, norms, cosine, module activation, overlap, regions),
and matches a dense in-memory reference on bf16 checkpoints full of ties, for any chunking."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import bar_heights, bar_widths, capture_figures, legend_texts, line_data

from dots.analyze.run import AnalyzeConfig, analyze, compute_analysis
from dots.errors import DotsError
from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.io.modules import layer_index, module_class, module_kind
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.vectors.masks import TopKMask
from dots.vectors.topk import RadixSelect, magnitude_bits

REPO = Path(__file__).resolve().parents[1]
H, FFN, V, L = 16, 32, 40, 3
QUICK = dict(figures=False)


# --- generated Qwen2-like checkpoints -----------------------------------------------------


def qwen2_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, H)}
    for i in range(L):
        p = f"model.layers.{i}."
        for proj in ("q", "k", "v"):
            shapes[p + f"self_attn.{proj}_proj.weight"] = (H, H)
            shapes[p + f"self_attn.{proj}_proj.bias"] = (H,)
        shapes[p + "self_attn.o_proj.weight"] = (H, H)
        shapes[p + "mlp.gate_proj.weight"] = (FFN, H)
        shapes[p + "mlp.up_proj.weight"] = (FFN, H)
        shapes[p + "mlp.down_proj.weight"] = (H, FFN)
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
    shapes["model.norm.weight"] = (H,)
    shapes["lm_head.weight"] = (V, H)
    return shapes


SHAPES = qwen2_shapes()
N = sum(math.prod(s) for s in SHAPES.values())


def write_checkpoint(path: Path, tensors: dict[str, torch.Tensor], dtype=torch.float32, tie: bool = False) -> Path:
    plan = {n: TensorInfo(tuple(t.shape), dtype) for n, t in tensors.items()}
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "tie_word_embeddings": tie}
    with CheckpointWriter(path, plan) as writer:
        for name, tensor in tensors.items():
            writer.write(name, tensor)
        writer.add_file("config.json", json.dumps(config))
        return writer.commit()


def grid_base(seed: int = 0) -> dict[str, torch.Tensor]:
    """Base weights on a 2^-10 grid: base + τ (on a 2^-12 grid) − base is exact in fp32."""
    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randint(-1024, 1025, s, generator=gen).float() / 1024 for n, s in SHAPES.items()}


def grid_values(n: int, gen: torch.Generator, lo: float = 0.25, hi: float = 1.0) -> torch.Tensor:
    """n magnitudes on the 2^-12 grid in [lo, hi]."""
    return torch.randint(int(lo * 4096), int(hi * 4096) + 1, (n,), generator=gen).float() / 4096


def random_signs(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n,), generator=gen).float() * 2 - 1


def exact_subset(n: int, count: int, gen: torch.Generator) -> torch.Tensor:
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randperm(n, generator=gen)[:count]] = True
    return mask


def save_trio(tmp: Path, base: dict, taus: dict[str, dict[str, torch.Tensor]]) -> tuple[Path, dict[str, Path]]:
    base_dir = write_checkpoint(tmp / "base", base)
    sources = {
        k: write_checkpoint(tmp / k, {n: base[n] + t[n].reshape(base[n].shape) for n in base}) for k, t in taus.items()
    }
    return base_dir, sources


def group_sum(values: dict[str, float], select) -> float:
    return sum(v for n, v in values.items() if select(n))


# --- naming ---------------------------------------------------------------------------------


def test_module_classes_and_layers():
    assert module_class("model.layers.3.self_attn.q_proj.weight") == "attention"
    assert module_class("model.layers.3.self_attn.q_norm.weight") == "norm"
    assert module_class("model.layers.3.mlp.down_proj.weight") == "mlp"
    assert module_class("model.layers.3.post_attention_layernorm.weight") == "norm"
    assert module_class("model.norm.weight") == "norm"
    assert module_class("model.embed_tokens.weight") == "embedding"
    assert module_class("lm_head.weight") == "lm_head"
    assert layer_index("model.layers.12.mlp.up_proj.weight") == 12
    assert layer_index("model.embed_tokens.weight") is None
    assert module_kind("model.layers.12.self_attn.k_proj.bias") == "self_attn.k_proj"
    assert module_kind("model.embed_tokens.weight") == "embed_tokens"


# --- exact top-k ----------------------------------------------------------------------------


def test_radix_select_is_exact_with_ties_across_chunks():
    gen = torch.Generator().manual_seed(3)
    values = (torch.randint(0, 50, (5000,), generator=gen).float() / 7) * random_signs(5000, gen)  # many ties
    values[:100] = 0.0
    chunks = list(values.split(333))
    ks = [0, 1, 17, 2500, 4999, 5000, 7000]
    sel = RadixSelect(ks)
    for c in chunks:
        sel.add_high(magnitude_bits(c.abs()))
    for c in chunks:
        sel.add_low(magnitude_bits(c.abs()))
    thresholds = sel.thresholds()
    order = torch.argsort(-values.abs(), stable=True)  # ties: lower index first
    for k in ks:
        t = thresholds[k]
        kk = min(k, values.numel())
        expected = torch.zeros(values.numel(), dtype=torch.bool)
        expected[order[:kk]] = True
        if kk:
            assert t.value == float(values.abs()[order[kk - 1]])
        mask = TopKMask(t)
        got = torch.cat([mask.mask(c.abs()) for c in chunks])
        assert int(got.sum()) == kk
        assert torch.equal(got, expected)


# --- planted structure ----------------------------------------------------------------------

SFT_DENSITY = {"attention": 0.5, "norm": 1.0, "embedding": 0.1, "lm_head": 0.0}
RLVR_DENSITY = {"attention": 0.2, "mlp": 0.1, "norm": 0.0, "embedding": 0.0, "lm_head": 0.5}
MLP_DENSITY_BY_LAYER = [0.25, 0.75, 1.0]  # sft's MLP density per layer
CONFLICT_RATE = 0.3


def sft_density(name: str) -> float:
    cls = module_class(name)
    return MLP_DENSITY_BY_LAYER[layer_index(name)] if cls == "mlp" else SFT_DENSITY[cls]


@pytest.fixture(scope="module")
def planted_pair(tmp_path_factory):
    """sft / rlvr with exact per-module, per-layer densities and a 30% conflict rate on
    the entries both change."""
    tmp = tmp_path_factory.mktemp("planted")
    gen = torch.Generator().manual_seed(11)
    base = grid_base()
    sft, rlvr, truth = {}, {}, {"sft": {}, "rlvr": {}, "both": {}, "opposite": {}, "either": {}}
    for name, shape in SHAPES.items():
        n = math.prod(shape)
        ms = exact_subset(n, round(sft_density(name) * n), gen)
        mr = exact_subset(n, round(RLVR_DENSITY[module_class(name)] * n), gen)
        ts = torch.where(ms, grid_values(n, gen) * random_signs(n, gen), 0.0)
        mag_r = grid_values(n, gen, 0.01, 0.1)
        sign_r = random_signs(n, gen)
        both = ms & mr
        idx = both.nonzero().flatten()
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        opposite = torch.zeros(n, dtype=torch.bool)
        opposite[idx[: round(CONFLICT_RATE * idx.numel())]] = True
        sign_r = torch.where(both, torch.sign(ts) * torch.where(opposite, -1.0, 1.0), sign_r)
        sft[name], rlvr[name] = ts, torch.where(mr, mag_r * sign_r, 0.0)
        for key, mask in (("sft", ms), ("rlvr", mr), ("both", both), ("opposite", opposite), ("either", ms | mr)):
            truth[key][name] = int(mask.sum())
    base_dir, sources = save_trio(tmp, base, {"sft": sft, "rlvr": rlvr})
    report = analyze(base_dir, sources, None, AnalyzeConfig(chunk_entries=100, **QUICK))
    return report, truth


def test_planted_sparsity_overall_per_layer_and_module(planted_pair):
    report, truth = planted_pair
    sp = report["sparsity"]
    numel = {n: math.prod(s) for n, s in SHAPES.items()}
    for key in ("sft", "rlvr"):
        assert sp["overall"][key] == pytest.approx(1 - sum(truth[key].values()) / N, abs=1e-12)
        assert sp["exact_zero"][key] == pytest.approx(sp["overall"][key], abs=1e-12)
        for layer in range(L):
            sel = lambda n, layer=layer: layer_index(n) == layer  # noqa: E731
            expected = 1 - group_sum(truth[key], sel) / group_sum(numel, sel)
            assert sp["per_layer"][key][layer] == pytest.approx(expected, abs=1e-12)
        for cls in ("attention", "mlp", "norm", "embedding", "lm_head"):
            sel = lambda n, cls=cls: module_class(n) == cls  # noqa: E731
            expected = 1 - group_sum(truth[key], sel) / group_sum(numel, sel)
            assert sp["by_module"][key][cls] == pytest.approx(expected, abs=1e-12)
    # the planted values themselves
    assert sp["by_module"]["sft"]["norm"] == 0.0 and sp["by_module"]["sft"]["lm_head"] == 1.0
    assert sp["by_module"]["rlvr"]["norm"] == 1.0 and sp["by_module"]["rlvr"]["lm_head"] == pytest.approx(0.5)
    assert sp["by_module"]["sft"]["attention"] == pytest.approx(0.5, abs=0.01)
    assert sp["by_kind"]["sft"]["mlp.up_proj"] == pytest.approx(1 - (0.25 + 0.75 + 1.0) / 3)


def test_planted_sign_conflict_and_regions(planted_pair):
    report, truth = planted_pair
    pair = report["pairs"]["sft|rlvr"]
    both, opposite, either = (sum(truth[k].values()) for k in ("both", "opposite", "either"))
    assert pair["sign"]["both_nonzero"] == both
    assert pair["sign"]["opposite"] == opposite
    assert pair["sign"]["fraction"] == pytest.approx(CONFLICT_RATE, abs=0.01)
    assert report["sign_interference"]["raw"]["fraction"] == pair["sign"]["fraction"]
    counts = pair["region_counts"]
    assert counts == {"conflict": opposite, "agree": both - opposite, "private": either - both, "unchanged": N - either}
    assert sum(pair["regions"][r] for r in ("conflict", "agree", "private", "unchanged")) == pytest.approx(1.0)
    assert pair["regions"]["overlap"] == pytest.approx(both / N)


@pytest.fixture(scope="module")
def planted_geometry(tmp_path_factory):
    """b = a/32 in layer 0, −a/32 in layer 1, disjoint support in layer 2, a/32 elsewhere."""
    tmp = tmp_path_factory.mktemp("geometry")
    gen = torch.Generator().manual_seed(5)
    base = grid_base(1)
    a, b = {}, {}
    for name, shape in SHAPES.items():
        n = math.prod(shape)
        values = grid_values(n, gen) * random_signs(n, gen)
        layer = layer_index(name)
        if layer == 2:
            half = exact_subset(n, n // 2, gen)
            a[name] = torch.where(half, values, 0.0)
            moved = torch.zeros(n)
            moved[~half] = values[half] / 32
            b[name] = moved
        else:
            a[name] = values
            b[name] = values / 32 * (-1 if layer == 1 else 1)
    base_dir, sources = save_trio(tmp, base, {"a": a, "b": b})
    report = analyze(base_dir, sources, None, AnalyzeConfig(sft="a", rlvr="b", chunk_entries=64, **QUICK))
    return report, a, b


def test_planted_norm_ratio_per_layer(planted_geometry):
    report, a, _ = planted_geometry
    norms = report["norms"]
    assert norms["ratio"]["global"] == pytest.approx(32.0, rel=1e-6)
    assert norms["ratio"]["per_layer"] == pytest.approx([32.0] * L, rel=1e-6)
    for layer in range(L):
        expected = math.sqrt(sum(float((t**2).sum()) for n, t in a.items() if layer_index(n) == layer))
        assert norms["per_layer"]["a"][layer] == pytest.approx(expected, rel=1e-6)
    assert norms["global"]["a"] == pytest.approx(math.sqrt(sum(float((t**2).sum()) for t in a.values())), rel=1e-6)
    assert report["summary"]["norm_ratio"] == pytest.approx(32.0, rel=1e-6)


def test_planted_cosine_and_conflict_norm(planted_geometry):
    report, a, b = planted_geometry
    pair = report["pairs"]["a|b"]
    assert pair["cosine_per_layer"] == pytest.approx([1.0, -1.0, 0.0], abs=1e-6)
    conflict_sq = sum(float(((a[n] * b[n]) ** 2).sum()) for n in a if layer_index(n) == 1)
    assert pair["conflict_norm"] == pytest.approx(math.sqrt(conflict_sq), rel=1e-5)
    layer1 = sum(math.prod(SHAPES[n]) for n in SHAPES if layer_index(n) == 1)
    assert pair["sign"]["opposite"] == layer1


@pytest.fixture(scope="module")
def planted_modules(tmp_path_factory):
    """sft's top-10% = every norm parameter + the rest in attention; rlvr's = all of the LM
    head + the rest in the MLPs."""
    tmp = tmp_path_factory.mktemp("modules")
    gen = torch.Generator().manual_seed(7)
    k = round(0.1 * N)
    taus = {}
    for key, full, partial in (("sft", "norm", "attention"), ("rlvr", "lm_head", "mlp")):
        n_full = sum(math.prod(s) for n, s in SHAPES.items() if module_class(n) == full)
        partial_names = [n for n in SHAPES if module_class(n) == partial]
        sizes = [math.prod(SHAPES[n]) for n in partial_names]
        chosen = exact_subset(sum(sizes), k - n_full, gen).split(sizes)
        big_in_partial = dict(zip(partial_names, chosen))
        tau = {}
        for name, shape in SHAPES.items():
            n = math.prod(shape)
            small = grid_values(n, gen, 2**-10, 0.125)
            big = grid_values(n, gen, 0.5, 1.0)
            if module_class(name) == full:
                pick = torch.ones(n, dtype=torch.bool)
            else:
                pick = big_in_partial.get(name, torch.zeros(n, dtype=torch.bool))
            tau[name] = torch.where(pick, big, small) * random_signs(n, gen)
        taus[key] = tau
    base_dir, sources = save_trio(tmp, grid_base(2), taus)
    return base_dir, sources, k


def test_planted_module_activation(planted_modules):
    base_dir, sources, k = planted_modules
    report = analyze(base_dir, sources, None, AnalyzeConfig(chunk_entries=50, **QUICK))
    ma = report["module_activation"]
    numel = report["module_numel"]
    assert ma["top_k"] == {"sft": k, "rlvr": k}
    assert ma["share_of_module"]["sft"] == pytest.approx(
        {
            "attention": (k - numel["norm"]) / numel["attention"],
            "mlp": 0.0,
            "norm": 1.0,
            "embedding": 0.0,
            "lm_head": 0.0,
        }
    )
    assert ma["share_of_module"]["rlvr"] == pytest.approx(
        {"attention": 0.0, "mlp": (k - numel["lm_head"]) / numel["mlp"], "norm": 0.0, "embedding": 0.0, "lm_head": 1.0}
    )
    assert ma["share_of_top"]["sft"]["norm"] == pytest.approx(numel["norm"] / k)
    assert sum(ma["share_of_top"]["rlvr"].values()) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def planted_interference(tmp_path_factory):
    """sft dense with distinct magnitudes; rlvr's top-10% R contradicts sft exactly where
    sft ranks in its top half, and agrees everywhere else."""
    tmp = tmp_path_factory.mktemp("interference")
    gen = torch.Generator().manual_seed(9)
    base = grid_base(3)
    names = list(SHAPES)
    rank = torch.randperm(N, generator=gen)  # 0 = largest |τ_sft|
    sft_flat = (N - rank).float() / 4096 * random_signs(N, gen)  # distinct magnitudes
    k = round(0.1 * N)
    in_r = exact_subset(N, k, gen)
    rlvr_mag = torch.where(in_r, grid_values(N, gen, 0.5, 1.0), grid_values(N, gen, 2**-10, 0.25))
    contradict = in_r & (rank < N // 2)
    rlvr_flat = rlvr_mag * torch.sign(sft_flat) * torch.where(contradict, -1.0, 1.0)
    sizes = [math.prod(SHAPES[n]) for n in names]
    sft = dict(zip(names, sft_flat.split(sizes)))
    rlvr = dict(zip(names, rlvr_flat.split(sizes)))
    base_dir, sources = save_trio(tmp, base, {"sft": sft, "rlvr": rlvr})
    report = analyze(base_dir, sources, None, AnalyzeConfig(chunk_entries=37, **QUICK))
    return report, rank, in_r, k


def test_planted_sign_interference_by_retention(planted_interference):
    report, rank, in_r, k = planted_interference
    si = report["sign_interference"]
    assert si["rlvr_kept_nonzero"] == k
    for r, got in zip(si["retentions"], si["conflict"]):
        kept = rank < round(r * N)
        expected = int((in_r & kept & (rank < N // 2)).sum()) / k
        assert got == pytest.approx(expected, abs=1e-12)
        assert got == pytest.approx(min(r, 0.5), abs=0.04)  # the planted shape
    assert si["raw"]["fraction"] == pytest.approx(int((in_r & (rank < N // 2)).sum()) / N)


def test_planted_overlap_of_three_sources(tmp_path):
    gen = torch.Generator().manual_seed(13)
    combos = ["a", "b", "c", "ab", "ac", "bc", "abc", ""]
    label = torch.randint(0, len(combos), (N,), generator=gen)
    names = list(SHAPES)
    sizes = [math.prod(SHAPES[n]) for n in names]
    taus = {}
    for key in "abc":
        member = torch.tensor([key in combos[i] for i in label.tolist()])
        flat = torch.where(member, grid_values(N, gen) * random_signs(N, gen), 0.0)
        taus[key] = dict(zip(names, flat.split(sizes)))
    base_dir, sources = save_trio(tmp_path, grid_base(4), taus)
    report = analyze(base_dir, sources, None, AnalyzeConfig(sft=None, rlvr=None, chunk_entries=200, **QUICK))
    count = {c: int((label == i).sum()) for i, c in enumerate(combos)}
    for key in "abc":
        unique = count[key]
        with_one = sum(count[c] for c in ("ab", "ac", "bc") if key in c)
        with_two = count["abc"]
        ov = report["overlap"]["sources"][key]
        assert ov["counts"] == [unique, with_one, with_two]
        assert ov["unique_share"] == pytest.approx(unique / (unique + with_one + with_two))
        assert ov["rho"] == pytest.approx((with_one + with_two) / unique)
    regions = report["pairs"]["a|b"]["region_counts"]
    both = count["ab"] + count["abc"]
    assert regions["conflict"] + regions["agree"] == both
    assert regions["unchanged"] == count["c"] + count[""]
    assert report["sign_interference"] is None and "norm_ratio" not in report["summary"]


def test_relative_threshold_sparsity(tmp_path):
    gen = torch.Generator().manual_seed(17)
    kinds = torch.randint(0, 3, (N,), generator=gen)  # 0: unchanged, 1: 2^-8 (< 0.01·max), 2: 0.5
    flat = torch.tensor([0.0, 2**-8, 0.5])[kinds] * random_signs(N, gen)
    flat[0] = 1.0  # max |τ|
    names = list(SHAPES)
    tau = dict(zip(names, flat.split([math.prod(SHAPES[n]) for n in names])))
    base_dir, sources = save_trio(tmp_path, grid_base(5), {"x": tau})
    report = analyze(base_dir, sources, None, AnalyzeConfig(sft=None, rlvr=None, relative_eps=0.01, **QUICK))
    big = int((kinds == 2).sum()) + (1 if kinds[0] != 2 else 0)
    changed = int((flat != 0).sum())
    assert report["sparsity"]["overall"]["x"] == pytest.approx(1 - changed / N)
    assert report["sparsity"]["relative"]["overall"]["x"] == pytest.approx(1 - big / N)
    assert report["sparsity"]["relative"]["max_abs"]["x"] == 1.0
    assert report["overlap"]["sources"]["x"]["unique_share"] == 1.0


# --- against a dense in-memory reference ----------------------------------------------------


@pytest.fixture(scope="module")
def bf16_trio(checkpoints) -> dict[str, Path]:
    """A bf16 base and three bf16 sources of other densities: {"base", "sft", "rlvr", "other": directory}."""
    family = checkpoints(
        {"dtype": torch.bfloat16},
        sft={"seed": 1, "scale": 0.01, "density": 0.7, "dtype": torch.bfloat16},
        rlvr={"seed": 2, "scale": 0.002, "density": 0.3, "dtype": torch.bfloat16},
        other={"seed": 3, "scale": 0.004, "density": 0.5, "dtype": torch.bfloat16},
    )
    return {"base": family.base, **family.sources}


def dense_reference(d: dict[str, Path], keys: list[str], cfg: AnalyzeConfig) -> dict:
    base = Checkpoint(d["base"])
    sources = {k: Checkpoint(d[k]) for k in keys}
    names = align(base, sources).merged
    flat = {k: torch.cat([(sources[k].get(n).float() - base.get(n).float()).reshape(-1) for n in names]) for k in keys}
    classes = sorted({module_class(n) for n in names})
    cls_index = torch.repeat_interleave(
        torch.tensor([classes.index(module_class(n)) for n in names]), torch.tensor([base.info(n).numel for n in names])
    )
    n = flat[keys[0]].numel()

    def top(k_key: str, k: int) -> torch.Tensor:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.argsort(-flat[k_key].abs(), stable=True)[:k]] = True
        return mask

    ref = {"n": n, "flat": flat, "in_class": {c: cls_index == i for i, c in enumerate(classes)}}
    k = round(cfg.top_fraction * n)
    ref["top"] = {key: top(key, k) for key in keys}
    ref["kth"] = {key: float(torch.sort(flat[key].abs(), descending=True).values[k - 1]) for key in keys}
    s, r = flat[cfg.sft], flat[cfg.rlvr]
    rlvr_kept = ref["top"][cfg.rlvr] & (r != 0)
    opposite = torch.sign(s) * torch.sign(r) < 0
    ref["conflict"] = [
        int((rlvr_kept & opposite & top(cfg.sft, round(q * n))).sum()) / int(rlvr_kept.sum()) for q in cfg.retentions
    ]
    return ref


@pytest.mark.parametrize("chunk_entries", [5, 1 << 22])
def test_matches_dense_reference_on_bf16_ties(bf16_trio, chunk_entries):
    d = bf16_trio
    keys = ["sft", "rlvr", "other"]
    cfg = AnalyzeConfig(chunk_entries=chunk_entries, **QUICK)
    report = analyze(d["base"], {k: d[k] for k in keys}, None, cfg)
    ref = dense_reference(d, keys, cfg)
    flat, n = ref["flat"], ref["n"]
    assert report["numel"] == n
    changed = {k: flat[k].abs() > cfg.eps for k in keys}
    for key in keys:
        assert report["norms"]["global"][key] == pytest.approx(float(flat[key].norm()), rel=1e-5)
        assert report["sparsity"]["overall"][key] == pytest.approx(1 - int(changed[key].sum()) / n, abs=1e-12)
        thresholds = report["topk"]["thresholds"][key]
        assert [t["value"] for t in thresholds if t["k"] == round(0.1 * n)] == [ref["kth"][key]]
        for c, share in report["module_activation"]["share_of_module"][key].items():
            in_class = ref["in_class"][c]
            assert share == pytest.approx(int((ref["top"][key] & in_class).sum()) / int(in_class.sum()), abs=1e-12)
        hist = sum(changed[k].int() for k in keys)
        assert report["overlap"]["sources"][key]["counts"] == [
            int((changed[key] & (hist == j + 1)).sum()) for j in range(3)
        ]
    assert report["sign_interference"]["conflict"] == pytest.approx(ref["conflict"], abs=1e-12)
    a, b = flat["sft"], flat["rlvr"]
    pair = report["pairs"]["sft|rlvr"]
    opposite = torch.sign(a) * torch.sign(b) < 0
    assert pair["sign"]["opposite"] == int(opposite.sum())
    assert pair["region_counts"]["conflict"] == int((changed["sft"] & changed["rlvr"] & opposite).sum())
    assert pair["cosine"] == pytest.approx(float(a @ b / (a.norm() * b.norm())), abs=1e-5)
    assert pair["conflict_norm"] == pytest.approx(float((a * b * opposite).norm()), rel=1e-4)
    assert set(report["pairs"]) == {"sft|rlvr", "sft|other", "rlvr|other"}


def test_tied_source_with_added_tokens(tmp_path):
    """A source with tied embeddings (no lm_head) and 3 added vocab rows: its lm_head τ is
    read from its embedding, restricted to the base's rows."""
    gen = torch.Generator().manual_seed(19)
    base = grid_base(6)
    tied = {n: base[n] + grid_values(math.prod(s), gen).reshape(s) for n, s in SHAPES.items() if n != "lm_head.weight"}
    tied["model.embed_tokens.weight"] = torch.cat([tied["model.embed_tokens.weight"], torch.ones(3, H)])
    base_dir = write_checkpoint(tmp_path / "base", base)
    src = write_checkpoint(tmp_path / "tied", tied, tie=True)
    report = analyze(base_dir, {"tied": src}, None, AnalyzeConfig(sft=None, rlvr=None, **QUICK))
    assert report["numel"] == N
    lm_tau = tied["model.embed_tokens.weight"][:V] - base["lm_head.weight"]
    assert report["norms"]["by_module"]["tied"]["lm_head"] == pytest.approx(float(lm_tau.norm()), rel=1e-6)


# --- files, reuse, errors, CLI ----------------------------------------------------------------


def test_writes_json_and_figures_and_reuses_them(bf16_trio, tmp_path, monkeypatch):
    """analysis.json and the six figures, each drawing the report's numbers; a second call
    reuses the JSON and redraws only a missing figure."""
    figures = capture_figures(monkeypatch)
    d = bf16_trio
    out = tmp_path / "out"
    sources = {"sft": d["sft"], "rlvr": d["rlvr"]}
    report = analyze(d["base"], sources, out, AnalyzeConfig(relative_eps=0.01))
    assert json.loads((out / "analysis.json").read_text())["summary"] == report["summary"]
    names = ["norms_per_layer", "sign_interference", "module_activation", "sparsity", "overlap", "regions"]
    assert sorted(figures) == sorted(f"{n}.png" for n in names) and all((out / f).exists() for f in figures)
    check_figures_draw_the_report(figures, report)
    stamp = (out / "analysis.json").stat().st_mtime_ns
    (out / "regions.png").unlink()
    again = analyze(d["base"], sources, out, AnalyzeConfig(relative_eps=0.01, chunk_entries=999))
    assert (out / "analysis.json").stat().st_mtime_ns == stamp  # reused, not recomputed
    assert again["input_key"] == report["input_key"] and (out / "regions.png").exists()
    analyze(d["base"], sources, out, AnalyzeConfig(relative_eps=0.02))
    assert json.loads((out / "analysis.json").read_text())["options"]["relative_eps"] == 0.02


@pytest.mark.parametrize(
    "sources, cfg, message",
    [
        ({"sft": "MISSING", "rlvr": "MISSING"}, AnalyzeConfig(), "does not exist"),
        ({"a": "SFT", "b": "RLVR"}, AnalyzeConfig(), "roles.sft='sft' is not a source"),
        ({"sft": "SFT", "rlvr": "RLVR"}, AnalyzeConfig(top_fraction=0.0), "top_fraction"),
        ({"sft": "SFT", "rlvr": "RLVR"}, AnalyzeConfig(sft="sft", rlvr="sft"), "same source"),
        ({"sft": "SFT", "rlvr": "RLVR"}, AnalyzeConfig(retentions=(0.5, 1.5)), "retentions"),
    ],
)
def test_bad_input_is_one_line_error_and_writes_nothing(bf16_trio, tmp_path, sources, cfg, message):
    d = bf16_trio
    paths = {k: str(d[v.lower()]) if v != "MISSING" else str(tmp_path / "nope") for k, v in sources.items()}
    out = tmp_path / "out"
    with pytest.raises(DotsError, match=message):
        analyze(d["base"], paths, out, cfg)
    assert not out.exists()


def test_compute_analysis_rejects_nan(tmp_path):
    base = grid_base(7)
    bad = {n: t.clone() for n, t in base.items()}
    bad["model.layers.1.mlp.up_proj.weight"][3, 4] = float("nan")
    base_dir = write_checkpoint(tmp_path / "base", base)
    src = write_checkpoint(tmp_path / "bad", bad)
    with pytest.raises(DotsError, match="NaN"):
        compute_analysis(Checkpoint(base_dir), {"bad": Checkpoint(src)}, AnalyzeConfig(sft=None, rlvr=None))


def test_cli_writes_analysis(bf16_trio, tmp_path):
    d = bf16_trio
    out = tmp_path / "cli"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(tmp_path / "runs")}
    cmd = [
        sys.executable,
        "-m",
        "dots.analyze",
        "~backbone",
        "+backbone.name=t",
        f"+backbone.base={d['base']}",
        f"+backbone.sources.sft={d['sft']}",
        f"+backbone.sources.rlvr={d['rlvr']}",
        f"output={out}",
        "figures=false",
        "top_fraction=0.2",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "analysis.json").read_text())
    assert report["options"]["top_fraction"] == 0.2 and report["sources"] == ["sft", "rlvr"]
    # the terminal: one line of headline numbers and what was written, not analysis.json's summary as JSON
    said = proc.stdout.splitlines()
    norm = report["summary"]["norm"]["sft"]
    assert said[-2].startswith(f"analysis: sft: ‖τ‖ {norm:.3g}, ") and said[-1] == f"wrote {out / 'analysis.json'}"
    assert "{" not in proc.stdout
    assert report["config"]["backbone"]["base"] == str(d["base"])
    bad = subprocess.run(
        cmd[:-3] + [f"output={tmp_path / 'bad'}", "roles.sft=nope"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: roles.sft='nope'")
    assert not (tmp_path / "bad").exists()


def _close(got, want):
    """Drawn numbers equal the report's (nested lists flattened)."""

    def flat(x):
        return [v for item in x for v in flat(item)] if isinstance(x, (list, tuple)) else [x]

    assert flat(got) == pytest.approx(flat(want), rel=1e-6, abs=1e-9), (got, want)


def _per_layer(values):
    return [i for i, v in enumerate(values) if v is not None], [v for v in values if v is not None]


def check_figures_draw_the_report(figures, report):
    """Each analysis figure draws the numbers of the report it was made from."""
    keys = list(report["norms"]["per_layer"])
    ax = figures["norms_per_layer.png"].axes[0]
    lines = line_data(ax)
    for key in keys:
        (label,) = [lb for lb in lines if lb.startswith(f"{key} (‖τ‖₂ = ")]
        _close(list(lines[label]), list(_per_layer(report["norms"]["per_layer"][key])))
    si = report["sign_interference"]
    ax = figures["sign_interference.png"].axes[0]
    _close(bar_heights(ax), [(c or 0.0) * 100 for c in si["conflict"]])
    _close(list(ax.get_xticks()), [r * 100 for r in si["retentions"]])
    ma = report["module_activation"]
    ax = figures["module_activation.png"].axes[0]
    _close(bar_heights(ax), [v * 100 for shares in ma["share_of_module"].values() for v in shares.values()])
    assert legend_texts(ax) == [f"uniform ({ma['fraction'] * 100:g}%)", *ma["share_of_module"]]
    sp = report["sparsity"]
    per_layer, by_module = figures["sparsity.png"].axes[:2]
    lines = line_data(per_layer)
    for key in keys:
        (label,) = [lb for lb in lines if lb.startswith(f"{key} (overall ")]
        xs, ys = _per_layer(sp["per_layer"][key])
        _close(list(lines[label]), [xs, [y * 100 for y in ys]])
    _close(bar_heights(by_module), [v * 100 for shares in sp["by_module"].values() for v in shares.values()])
    density, shared = figures["overlap.png"].axes[:2]
    _close(bar_heights(density), [(1.0 - sp["overall"][k]) * 100 for k in report["overlap"]["sources"]])
    ov = report["overlap"]["sources"]
    stacked = [(ov[k]["histogram"][j] or 0.0) * 100 for j in range(len(ov)) for k in ov]
    _close(bar_heights(shared), stacked)
    regions, cosine = figures["regions.png"].axes[:2]
    pairs = report["pairs"]
    parts = ("conflict", "agree", "private", "unchanged")
    _close(bar_widths(regions), [pairs[p]["regions"][part] * 100 for part in parts for p in pairs])
    assert [t.get_text() for t in regions.get_yticklabels()] == list(pairs)
    for p in pairs:
        (label,) = [lb for lb in line_data(cosine) if lb.startswith(f"{p} (global ")]
        _close(list(line_data(cosine)[label]), list(_per_layer(pairs[p]["cosine_per_layer"])))
