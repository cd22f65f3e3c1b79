"""Each merge method against a direct dense computation of its docs/method.md §5 formula.

The reference functions below are written from the formulas, independently of
dots.merge.methods (plain loops over models, sorts instead of radix selection). The only
shared convention is the documented seeding of random masks: per model i and block b of
DROP_BLOCK entries, torch.rand from a CPU generator seeded by
dots.testing.name_seed(f"{tensor name}|{i}|{b}", seed).
"""

from __future__ import annotations

import dis
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from dots.errors import DotsError
from dots.keys import name_seed
from dots.merge.methods import METHODS, available_methods, build_options, get_method
from dots.merge.methods.base import DROP_BLOCK, WHOLE, topk_magnitude_mask

EPS = 1e-5


# --- references -------------------------------------------------------------------------


def ref_topk(x: torch.Tensor, density: float) -> torch.Tensor:
    """Top round(density·n) by |x|; among equal magnitudes the lower flat index wins."""
    flat = x.reshape(-1).abs()
    k = round(density * flat.numel())
    order = torch.sort(flat, descending=True, stable=True).indices[:k]
    mask = torch.zeros(flat.numel(), dtype=torch.bool)
    mask[order] = True
    return mask.view(x.shape)


def ref_linear(deltas, weights):
    return sum(w * d for w, d in zip(weights, deltas)) / sum(weights)


def ref_task_arithmetic(deltas, weights, scale):
    return scale * sum(w * d for w, d in zip(weights, deltas))


def ref_disjoint_mean(deltas, weights):
    elected = torch.sign(sum(w * d for w, d in zip(weights, deltas)))
    num = torch.zeros_like(deltas[0])
    den = torch.zeros_like(deltas[0])
    for w, d in zip(weights, deltas):
        agree = (torch.sign(d) == elected) & (d != 0)
        num += w * d * agree
        den += w * agree
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), torch.zeros_like(num))


def ref_ties(deltas, weights, density, scale):
    trimmed = [d * ref_topk(d, density) for d in deltas]
    return scale * ref_disjoint_mean(trimmed, weights)


def ref_drop(name, seed, shape, p, index=0):
    """True = dropped: blocks of DROP_BLOCK entries, each from its own keyed generator."""
    n = math.prod(shape)
    parts = [
        torch.rand(
            min(DROP_BLOCK, n - start),
            generator=torch.Generator().manual_seed(name_seed(f"{name}|{index}|{start // DROP_BLOCK}", seed)),
        )
        < p
        for start in range(0, n, DROP_BLOCK)
    ]
    return torch.cat(parts).view(shape)


def ref_dare_masks(name, seed, shape, k, p):
    return [~ref_drop(name, seed, shape, p, i) for i in range(k)]


def ref_dare(name, deltas, weights, p, combine, scale, seed=0):
    masks = ref_dare_masks(name, seed, deltas[0].shape, len(deltas), p)
    kept = [d * m / (1 - p) for d, m in zip(deltas, masks)]
    if combine == "ties":
        return scale * ref_disjoint_mean(kept, weights)
    return scale * sum(w * d for w, d in zip(weights, kept))


def ref_ram_lambdas(flat_deltas, r, alpha, eps=EPS):
    changed = [d.abs() > eps for d in flat_deltas]
    count = sum(m.int() for m in changed)
    lambdas = []
    for m in changed:
        shared = int((m & (count >= 2)).sum())
        unique = int((m & (count == 1)).sum())
        rho = shared / unique if unique else (math.inf if shared else 0.0)
        lambdas.append(1 + r * min(max(rho, 0.0), alpha))
    return lambdas


def ref_ram(deltas, lambdas, eps=EPS):
    """Eq. 7 element by element."""
    flat = [d.reshape(-1) for d in deltas]
    out = torch.zeros_like(flat[0])
    for j in range(out.numel()):
        active = [t for t in range(len(flat)) if abs(float(flat[t][j])) > eps]
        if len(active) == 1:
            out[j] = lambdas[active[0]] * flat[active[0]][j]
        elif len(active) >= 2:
            out[j] = sum(flat[t][j] for t in active) / len(active)
    return out.view(deltas[0].shape)


def ref_sar(name, a, b, fisher_a, fisher_b, p, scale, seed=0, eps=EPS):
    changed_a, changed_b = a.abs() > eps, b.abs() > eps
    conflict = changed_a & changed_b & (a * b < 0)
    r = a + b
    r = torch.where(conflict & (fisher_a > fisher_b), a, r)
    r = torch.where(conflict & (fisher_b >= fisher_a), b, r)
    private = changed_a != changed_b
    if private.any():
        values = torch.sort(r.abs()[private]).values
        median = values[(values.numel() - 1) // 2]  # lower median
        low = private & (r.abs() < median)
        dropped = ref_drop(name, seed, tuple(r.shape), p)
        r = torch.where(low & dropped, torch.zeros_like(r), r)
        r = torch.where(low & ~dropped, r / (1 - p), r)
    return scale * r


# --- inputs -----------------------------------------------------------------------------


def sparse_deltas(shape=(23, 29), k=3, seed=0, density=(1.0, 0.4, 0.2)):
    """Task vectors with unchanged (exact 0 or |τ| ≤ ε), unique, shared and conflicting entries."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(k):
        d = torch.randn(shape, generator=gen) * 0.01
        keep = torch.rand(shape, generator=gen) < density[i % len(density)]
        tiny = torch.rand(shape, generator=gen) < 0.05  # below ε: "unchanged" for RAM/SAR
        d = torch.where(keep, d, torch.zeros_like(d))
        d = torch.where(tiny & ~keep, torch.full_like(d, 5e-6), d)
        out.append(d)
    return out


def run(method: str, name: str, deltas, weights=None, stats=None, **options):
    spec = get_method(method)
    opts = build_options(spec, options)
    base = torch.randn(deltas[0].shape)
    weights = weights or [1.0] * len(deltas)
    inputs = {"name": name, "base": base, "deltas": [d.clone() for d in deltas], "weights": weights}
    return spec.merge({**inputs, "options": opts, "stats": stats, "part": WHOLE})


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-8)


# --- tests ------------------------------------------------------------------------------


def test_registry_is_the_set_of_method_configs_and_rejects_unknown():
    """Every conf/method/*.yaml names a registered method and every registered method has a config."""
    import yaml

    conf = Path(__file__).resolve().parent.parent / "dots" / "conf" / "method"
    configured = {yaml.safe_load(p.read_text())["name"] for p in conf.glob("*.yaml")}
    assert configured == set(available_methods()) == set(METHODS)
    assert all(name == method.name for name, method in METHODS.items())
    with pytest.raises(DotsError, match="unknown merge method 'nope'"):
        get_method("nope")


def _used_names(fn) -> set[str]:
    """Names the function's bytecode reads (LOAD_FAST and friends), or hands to a closure."""
    used = set(fn.__code__.co_cellvars)
    for ins in dis.get_instructions(fn):
        if ins.opname.startswith("LOAD_"):
            used.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return used


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_declared_input_is_used(name):
    """A method asks only for what it reads: each parameter of its merge function and passes
    is read in the function's body (so the executor never computes an input for nothing)."""
    method = METHODS[name]
    for role, declared in (("merge", method.merge), ("first", method.first_pass), ("tensor", method.tensor_pass)):
        if declared is not None:
            unused = set(declared.inputs) - _used_names(declared.fn)
            assert not unused, f"{name}'s {role} function declares {sorted(unused)} and never reads them"
    assert method.weighted == ("weights" in method.merge.inputs)


def test_a_method_that_asks_for_an_input_nobody_offers_is_refused():
    from dots.merge.methods import merge_method

    with pytest.raises(TypeError, match=r"asks for \['theta'\]"):
        merge_method("broken")(lambda deltas, theta: deltas[0])
    with pytest.raises(TypeError, match="kwargs"):
        merge_method("broken")(lambda deltas, **kwargs: deltas[0])


@pytest.mark.parametrize(
    "method,options,message",
    [
        ("ties", {"density": 0.0}, "density"),
        ("ties", {"density": 1.5}, "density"),
        ("dare", {"p": 1.0}, "p"),
        ("dare", {"combine": "mean"}, "combine"),
        ("ram_plus", {"scope": "layer"}, "scope"),
        ("dots_fixed", {"density": -0.1}, "density"),
        ("ties", {"dnsity": 0.3}, "unknown option"),
    ],
)
def test_bad_options_are_one_line_errors(method, options, message):
    with pytest.raises(DotsError, match=message) as info:
        build_options(get_method(method), options)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("shape,density", [((7, 11), 0.2), ((1000,), 0.37), ((3, 5), 1.0), ((4,), 0.1)])
def test_topk_mask_matches_stable_sort(shape, density):
    x = torch.randn(shape)
    assert torch.equal(topk_magnitude_mask(x, density), ref_topk(x, density))


@pytest.mark.parametrize("density", [0.3, 0.9])
def test_topk_mask_ties_and_large_tensor_path(density):
    """Past 4·SAMPLE entries the sampled bracket runs, here over several chunks; equal
    magnitudes (heavy ties, also at the bracket ends) test the tie rule."""
    n = 300_007
    x = torch.randint(-3, 4, (n,)).float()  # magnitudes 0..3, heavily tied
    mask = topk_magnitude_mask(x, density, chunk=1 << 16)
    assert int(mask.sum()) == round(density * n)
    assert torch.equal(mask, ref_topk(x, density))
    y = torch.randn(n)
    assert torch.equal(topk_magnitude_mask(y, density, chunk=1 << 16), ref_topk(y, density))


def test_linear_and_task_arithmetic():
    deltas = sparse_deltas()
    close(run("linear", "w", deltas, weights=[1.0, 2.0, 0.5]), ref_linear(deltas, [1.0, 2.0, 0.5]))
    close(run("linear", "w", deltas), sum(deltas) / 3)
    close(
        run("task_arithmetic", "w", deltas, weights=[1.0, 0.5, 2.0], scale=0.7),
        ref_task_arithmetic(deltas, [1.0, 0.5, 2.0], 0.7),
    )


@pytest.mark.parametrize("density,scale,weights", [(0.2, 1.0, None), (0.5, 0.8, [1.0, 2.0, 0.5]), (1.0, 1.0, None)])
def test_ties(density, scale, weights):
    deltas = sparse_deltas(seed=3)
    w = weights or [1.0] * 3
    close(run("ties", "w", deltas, weights=w, density=density, scale=scale), ref_ties(deltas, w, density, scale))


def test_ties_disjoint_mean_by_hand():
    a = torch.tensor([1.0, -2.0, 3.0, 0.0, -1.0])
    b = torch.tensor([3.0, 1.0, -1.0, 0.0, 1.0])
    # entry 0: both +, mean 2; entry 1: sum -1 → only a agrees: -2; entry 2: sum 2 → only a: 3;
    # entry 3: nothing; entry 4: sum 0 → no elected sign → 0
    expected = torch.tensor([2.0, -2.0, 3.0, 0.0, 0.0])
    close(run("ties", "w", [a, b], density=1.0), expected)


@pytest.mark.parametrize("combine", ["linear", "ties"])
@pytest.mark.parametrize("p", [0.9, 0.3])
def test_dare(combine, p):
    deltas = sparse_deltas(shape=(31, 17), seed=4)
    w = [1.0, 0.5, 1.5]
    out = run("dare", "model.layers.0.mlp.up_proj.weight", deltas, weights=w, p=p, combine=combine, scale=0.9)
    close(out, ref_dare("model.layers.0.mlp.up_proj.weight", deltas, w, p, combine, 0.9))


def test_dare_drops_the_expected_share():
    d = torch.ones(200, 200)
    out = run("dare", "x", [d], p=0.9)
    kept = float((out != 0).float().mean())
    assert abs(kept - 0.1) < 0.01
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 10.0))


def test_drop_mask_blocks_drawn_in_parallel_match_the_definition():
    """A tensor over several DROP_BLOCKs takes the threaded path; blocks keep their own keys."""
    from dots.merge.methods.base import drop_mask

    shape = (3, DROP_BLOCK // 2 + 7)  # 1.5 blocks + a ragged tail
    mask = drop_mask(shape, 0.3, "layer.w", 5, index=1)
    assert torch.equal(mask, ref_drop("layer.w", 5, shape, 0.3, index=1))
    assert abs(float(mask.float().mean()) - 0.3) < 0.005
    assert not torch.equal(mask, drop_mask(shape, 0.3, "layer.w", 5, index=0))


def test_dare_identical_across_runs_and_tensor_order():
    tensors = {n: sparse_deltas(shape=(13, 9), seed=i) for i, n in enumerate(["a.weight", "b.weight", "c.bias"])}
    forward = {n: run("dare", n, d, p=0.5) for n, d in tensors.items()}
    backward = {n: run("dare", n, d, p=0.5) for n, d in reversed(list(tensors.items()))}
    again = {n: run("dare", n, d, p=0.5) for n, d in tensors.items()}
    for n in tensors:
        assert torch.equal(forward[n], backward[n]) and torch.equal(forward[n], again[n])
    assert not torch.equal(run("dare", "a.weight", tensors["a.weight"], p=0.5, seed=1), forward["a.weight"])


def _ram_stats(method, named_deltas, **options):
    spec = get_method(method)
    opts = build_options(spec, options)
    stream = lambda: ((n, torch.zeros(d[0].shape), [t.clone() for t in d]) for n, d in named_deltas.items())  # noqa: E731
    assert spec.first_pass is not None
    alignment = _Keys(len(next(iter(named_deltas.values()))))
    return spec.first_pass({"stream": stream, "options": opts, "alignment": alignment})


class _Keys:
    """The only thing RAM's first pass reads from the alignment: the source keys (for its log)."""

    def __init__(self, k):
        self.sources = {f"s{i}": None for i in range(k)}


def test_ram_is_eq7_without_rescale():
    deltas = sparse_deltas(shape=(9, 8), seed=5)
    close(run("ram", "w", deltas), ref_ram(deltas, [1.0, 1.0, 1.0]))


@pytest.mark.parametrize("alpha", [2.0, 0.5])
def test_ram_plus_global_rho_over_the_whole_model(alpha):
    named = {"a": sparse_deltas(shape=(9, 8), seed=6), "b": sparse_deltas(shape=(5,), seed=7)}
    stats = _ram_stats("ram_plus", named, alpha=alpha)
    flat = [torch.cat([named["a"][i].reshape(-1), named["b"][i].reshape(-1)]) for i in range(3)]
    lambdas = ref_ram_lambdas(flat, 0.1, alpha)
    assert stats.lambdas == pytest.approx(lambdas)
    for n, d in named.items():
        close(run("ram_plus", n, d, stats=stats, alpha=alpha), ref_ram(d, lambdas))


def test_ram_plus_tensor_scope():
    deltas = sparse_deltas(shape=(9, 8), seed=8)
    lambdas = ref_ram_lambdas([d.reshape(-1) for d in deltas], 0.1, 2.0)
    close(run("ram_plus", "w", deltas, scope="tensor"), ref_ram(deltas, lambdas))


def test_ram_with_a_model_that_has_no_unique_entries():
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(6, 7, generator=gen) * 0.01
    b = torch.where(torch.rand(6, 7, generator=gen) < 0.5, torch.randn(6, 7, generator=gen) * 0.01, 0.0)
    b = torch.where(a.abs() > EPS, b, 0.0)  # b only changes what a changed: no unique entry
    stats = _ram_stats("ram_plus", {"w": [a, b]})
    assert stats.unique[1] == 0 and stats.lambdas[1] == pytest.approx(1 + 0.1 * 2.0)  # ρ = ∞ → α
    out = run("ram_plus", "w", [a, b], stats=stats)
    assert torch.isfinite(out).all()
    close(out, ref_ram([a, b], stats.lambdas))
    nothing = _ram_stats("ram_plus", {"w": [torch.zeros(3), torch.zeros(3)]})
    assert nothing.lambdas == [1.0, 1.0]
    assert torch.equal(run("ram", "w", [torch.zeros(3), torch.zeros(3)]), torch.zeros(3))


def _sar_stats(tmp_path, name, fisher_a, fisher_b):
    from dots.merge.fisher import FisherTable
    from dots.merge.methods.sar import SarStats

    tables = []
    for key, f in (("a", fisher_a), ("b", fisher_b)):
        save_file({name: f.contiguous()}, str(tmp_path / f"{key}.safetensors"))
        tables.append(FisherTable(tmp_path / f"{key}.safetensors"))
    return SarStats(tables)


@pytest.mark.parametrize("p,scale", [(0.2, 1.0), (0.5, 0.7), (0.0, 1.0)])
def test_sar(tmp_path, p, scale):
    name = "model.layers.1.self_attn.q_proj.weight"
    a, b = sparse_deltas(shape=(40, 30), k=2, seed=10, density=(0.6, 0.5))
    gen = torch.Generator().manual_seed(11)
    fisher_a, fisher_b = torch.rand(40, 30, generator=gen), torch.rand(40, 30, generator=gen)
    fisher_b[:5] = fisher_a[:5]  # exact ties → B
    stats = _sar_stats(tmp_path, name, fisher_a, fisher_b)
    out = run("sar", name, [a, b], stats=stats, p=p, scale=scale)
    close(out, ref_sar(name, a, b, fisher_a, fisher_b, p, scale))


def test_sar_conflicts_follow_fisher(tmp_path):
    a = torch.tensor([0.1, 0.1, -0.2, 0.3, 0.0])
    b = torch.tensor([-0.2, -0.2, -0.1, 0.0, 0.0])
    fa = torch.tensor([2.0, 1.0, 0.0, 0.0, 0.0])
    fb = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])
    out = run("sar", "v", [a, b], stats=_sar_stats(tmp_path, "v", fa, fb), p=0.0)
    # conflict, S_A > S_B → A; conflict, tie → B; agreeing → sum; private → as is; unchanged → 0
    close(out, torch.tensor([0.1, -0.2, -0.3, 0.3, 0.0]))


def test_sar_needs_two_sources_in_the_registry():
    spec = get_method("sar")
    assert (spec.min_sources, spec.max_sources) == (2, 2)


# --- Fisher (SAR's sensitivity, Eq. 13) ---------------------------------------------------


def _reference_fisher(path, pairs):
    """Mean over examples of (∂ Σ_completion log p / ∂θ)², via transformers' own shifted loss."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    total = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for prompt, completion_ids in pairs:
        prompt_ids = tok(prompt).input_ids
        ids = torch.tensor([prompt_ids + completion_ids])
        labels = torch.tensor([[-100] * len(prompt_ids) + completion_ids])
        model.zero_grad()
        (model(input_ids=ids, labels=labels).loss * len(completion_ids)).backward()  # = −log p(y|x)
        for n, p in model.named_parameters():
            total[n] += p.grad**2
    return {n: t / len(pairs) for n, t in total.items()}, model, tok


def test_fisher_with_gold_answers(qwen_bf16):
    from transformers import AutoTokenizer

    from dots.merge.calibration import CalibrationExample
    from dots.merge.fisher import compute_fisher

    path = qwen_bf16.sources["sft"]
    tok = AutoTokenizer.from_pretrained(path)
    examples = [CalibrationExample("12+34=", "\\boxed{46}"), CalibrationExample("What is 9 - 4?", "5")]
    fisher = compute_fisher(path, examples)
    pairs = [(e.prompt, tok(e.answer, add_special_tokens=False).input_ids) for e in examples]
    expected, _, _ = _reference_fisher(path, pairs)
    assert set(fisher) == set(expected)
    for name in expected:
        torch.testing.assert_close(fisher[name], expected[name], rtol=1e-4, atol=1e-12, msg=name)
    assert all(float(t.sum()) > 0 for t in fisher.values())


def test_fisher_never_holds_every_gradient(checkpoints):
    """The Fisher pass holds the weights and the float32 accumulator, and each parameter's
    gradient only until it is squared into the accumulator: never the whole model's gradients
    at once (≈ 4 bytes per parameter more: 6 GB at a 2-layer 7B shape, where the bf16 Fisher
    got within 2 GiB of this 24 GiB machine's MemAvailable and was stopped)."""
    from safetensors.torch import load_file

    from dots.merge.calibration import builtin_calibration
    from dots.merge.fisher import compute_fisher
    from dots.testing import peak_cpu_alloc_bytes

    path = checkpoints({"hidden_size": 256, "intermediate_size": 1024}).base
    weights = sum(t.numel() * 4 for t in load_file(str(path / "model.safetensors")).values())
    peak = peak_cpu_alloc_bytes(lambda: compute_fisher(path, builtin_calibration(2, 0)))
    # weights + accumulator + activations and one gradient; all gradients at once: ≈ 3 × weights
    assert peak < 2.5 * weights, (peak, weights)


def test_fisher_without_gold_uses_the_greedy_answer(qwen_bf16):
    from dots.merge.calibration import CalibrationExample
    from dots.merge.fisher import compute_fisher

    path = qwen_bf16.sources["rlvr"]
    fisher = compute_fisher(path, [CalibrationExample("7+8=", None)], max_new_tokens=5)
    _, model, tok = _reference_fisher(path, [("7+8=", [0])])
    prompt_ids = tok("7+8=", return_tensors="pt").input_ids
    greedy = model.generate(prompt_ids, max_new_tokens=5, do_sample=False)[0, prompt_ids.shape[1] :].tolist()
    expected, _, _ = _reference_fisher(path, [("7+8=", greedy)])
    for name in expected:
        torch.testing.assert_close(fisher[name], expected[name], rtol=1e-4, atol=1e-12, msg=name)


def test_fisher_cache_is_keyed_and_reused(qwen_bf16, tmp_path):
    from dots.io.checkpoint import Checkpoint
    from dots.merge.calibration import builtin_calibration
    from dots.merge.fisher import fisher_for

    ckpt = Checkpoint(qwen_bf16.sources["sft"])
    examples = builtin_calibration(3, seed=0)
    first = fisher_for(ckpt, examples, tmp_path)
    stamp = first.stat().st_mtime_ns
    assert fisher_for(ckpt, examples, tmp_path) == first and first.stat().st_mtime_ns == stamp
    other = fisher_for(ckpt, builtin_calibration(3, seed=1), tmp_path)
    assert other != first and len(list(tmp_path.glob("*.safetensors"))) == 2


def test_calibration_from_a_pool_keeps_gold_answers(tmp_path):
    import json

    from dots.merge.calibration import calibration_set

    path = tmp_path / "pool.jsonl"
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(10)] + [{"question": "open"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = {"kind": "jsonl", "path": str(path), "question_key": "question", "answer_key": "answer"}
    chosen = calibration_set(cfg, n=4, seed=0, format_prompt=lambda q: f"Q: {q}")
    assert len(chosen) == 4 and all(c.prompt.startswith("Q: ") for c in chosen)
    everything = calibration_set(cfg, n=64)
    assert {c.prompt: c.answer for c in everything}["open"] is None
    assert {c.prompt: c.answer for c in everything}["q3"] == "3"
    builtin = calibration_set(None, n=64)
    assert len(builtin) == 64 and all(c.answer.startswith("\\boxed{") for c in builtin)


# --- blockwise: row blocks give the whole tensor's bits --------------------------------------


def _by_blocks(method: str, name: str, base, deltas, rows_per_block: int, stats=None, **options):
    """Run a blockwise method the way the executor does on a large tensor: tensor_pass over the
    row blocks, then merge block by block with its Part."""
    from dots.merge.methods.base import Part

    spec = get_method(method)
    opts = build_options(spec, options)
    per_row = math.prod(base.shape[1:])
    spans = [(r, min(r + rows_per_block, base.shape[0])) for r in range(0, base.shape[0], rows_per_block)]

    def blocks():
        for r0, r1 in spans:
            yield r0 * per_row, base[r0:r1].clone(), [d[r0:r1].clone() for d in deltas]

    offered = {"name": name, "total": base.numel(), "blocks": blocks, "options": opts, "stats": stats}
    facts = spec.tensor_pass(offered) if spec.tensor_pass else None
    common = {"name": name, "weights": [1.0] * len(deltas), "options": opts, "stats": stats}
    return torch.cat(
        [
            spec.merge({**common, "base": b, "deltas": ds, "part": Part(start, base.numel(), facts)})
            for start, b, ds in blocks()
        ]
    )


BLOCKWISE = [
    ("task_arithmetic", {"scale": 0.7}),
    ("linear", {}),
    ("ties", {"density": 0.2}),
    ("ties", {"density": 0.5}),
    ("dare", {"p": 0.5}),
    ("dare", {"p": 0.3, "combine": "ties"}),
    ("ram", {}),
    ("ram_plus", {"scope": "tensor"}),
]


BLOCKWISE_SPLITS = [
    (m, o, rows) for m, o in BLOCKWISE for rows in (1, 7, 64) if not (m == "dare" and rows == 1)
]  # (dare spans 2^21 entries: 7 rows already cut drop blocks)


@pytest.mark.parametrize(
    "method,options,rows_per_block",
    BLOCKWISE_SPLITS,
    ids=[f"{m}-{'-'.join(map(str, o.values()))}-{r}rows" for m, o, r in BLOCKWISE_SPLITS],
)
def test_blockwise_equals_whole_tensor(method, options, rows_per_block):
    """Quantised task vectors (many equal magnitudes, so TIES keeps only part of the ties at its
    threshold) over several drop blocks: every split gives exactly the whole tensor's result."""
    gen = torch.Generator().manual_seed(3)
    shape = (192, (2 * DROP_BLOCK) // 192 + 5) if method == "dare" else (96, 40)
    base = torch.randn(shape, generator=gen)
    deltas = [torch.randint(-4, 5, shape, generator=gen).float() * 0.25 for _ in range(3)]
    deltas[2][::3] = 0.0  # entries one model leaves alone (RAM's unique / shared split)
    whole = run(method, "layer.w", deltas, **options)
    blocked = _by_blocks(method, "layer.w", base, deltas, rows_per_block, **options)
    assert torch.equal(blocked, whole)


def test_blockwise_ties_keeps_ties_by_flat_index():
    """The tie cutoff: of the entries equal to the k-th magnitude, the lowest flat indices are kept."""
    x = torch.tensor([[1.0, 2.0, 2.0], [2.0, -2.0, 3.0]])  # k = round(0.5·6) = 3: 3, then two of four 2s
    blocked = _by_blocks("ties", "t", torch.zeros_like(x), [x], 1, density=0.5)
    assert torch.equal(blocked, torch.tensor([[0.0, 2.0, 2.0], [0.0, 0.0, 3.0]]))
