"""search.granularity=module (#20 part 3): one λ per source and module group (attention, mlp,
embed_head, norm) — the classifier, the synthesis (streamed, resident, both engines with either
synth_cache), the study's parameters (fixed points, requeue, duplicates), the run identity, the
model card, and a lab search to its export."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import torch
import yaml
from engine_args import SMALL_VLLM, TRIO_SOURCES
from helpers import compose, overrides, require_vllm, run

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.modules import MODULE_GROUPS, module_group
from dots.options.engine import EngineOptions
from dots.search.study.granularity import coefficients_from_params, fixed_point, param_names
from dots.vectors.cache import TaskVectors, build_task_vectors
from dots.vectors.coefficients import check_coefficients
from dots.vectors.sparsify import SparsifyConfig
from dots.vectors.synth import ResidentSynthesizer, synthesize_dict

# a λ per group that differs between groups and sources (one 0: that source is not read there)
PER_GROUP = {
    "sft": {"attention": 0.3, "mlp": 1.7, "embed_head": 0.9, "norm": 1.1},
    "rlvr": {"attention": 1.5, "mlp": 0.0, "embed_head": 2.0, "norm": 0.4},
}


def task_vectors(family, root) -> TaskVectors:
    return build_task_vectors(
        Checkpoint(family.base), {k: Checkpoint(v) for k, v in family.sources.items()}, SparsifyConfig(), root
    )


# --- the classifier ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, group",
    [
        ("model.layers.0.self_attn.q_proj.weight", "attention"),
        ("model.layers.0.self_attn.k_proj.bias", "attention"),
        ("model.layers.11.self_attn.v_proj.bias", "attention"),
        ("model.layers.3.self_attn.o_proj.weight", "attention"),
        ("model.layers.3.mlp.gate_proj.weight", "mlp"),
        ("model.layers.3.mlp.up_proj.weight", "mlp"),
        ("model.layers.3.mlp.down_proj.weight", "mlp"),
        ("model.embed_tokens.weight", "embed_head"),
        ("lm_head.weight", "embed_head"),
        ("model.layers.3.input_layernorm.weight", "norm"),
        ("model.layers.3.post_attention_layernorm.weight", "norm"),
        ("model.layers.3.self_attn.q_norm.weight", "norm"),  # Qwen3: a norm inside attention
        ("model.norm.weight", "norm"),
    ],
)
def test_module_group_of_qwen_llama_mistral_names(name, group):
    assert module_group(name) == group


def test_a_tensor_without_a_group_is_an_error_naming_it():
    with pytest.raises(DotsError, match=r"'vision_tower\.patch\.weight'.*granularity=model"):
        module_group("vision_tower.patch.weight")


# --- synthesis --------------------------------------------------------------------------


@pytest.mark.parametrize("family_name", ["qwen_bf16", "llama_fp32_tied_sharded"])
def test_equal_groups_give_the_bits_of_one_lambda_per_source(tiny_family, tmp_path, family_name):
    """A source whose four groups share λ is the model-granularity synthesis, bit for bit —
    streamed and resident."""
    tv = task_vectors(tiny_family(family_name), tmp_path / "cache")
    one = {"sft": 0.7, "rlvr": 1.3}
    per_group = {k: dict.fromkeys(MODULE_GROUPS, v) for k, v in one.items()}
    expected = synthesize_dict(tv, one)
    got = synthesize_dict(tv, per_group)
    resident = dict((n, t.clone()) for n, t in ResidentSynthesizer(tv, device="cpu")(per_group))
    assert got.keys() == expected.keys() == resident.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
        assert torch.equal(resident[name], tensor), name


@pytest.mark.parametrize("family_name", ["qwen_bf16", "llama_fp32_tied_sharded"])
def test_every_tensor_takes_the_lambda_of_its_group(tiny_family, tmp_path, family_name):
    """θ(λ per group) = for each tensor, θ at one λ per source equal to its group's λ; resident the same."""
    tv = task_vectors(tiny_family(family_name), tmp_path / "cache")
    assert {module_group(n) for n in tv.names} == set(MODULE_GROUPS)  # every group is exercised
    got = synthesize_dict(tv, PER_GROUP)
    resident = dict((n, t.clone()) for n, t in ResidentSynthesizer(tv, device="cpu")(PER_GROUP))
    at_group = {g: synthesize_dict(tv, {k: v[g] for k, v in PER_GROUP.items()}) for g in MODULE_GROUPS}
    base = Checkpoint(tiny_family(family_name).base)
    for name in base.names:
        expected = at_group[module_group(name)][name] if name in tv.names else base.get(name)
        assert torch.equal(got[name], expected), name
        assert torch.equal(resident[name], expected), name
    assert not torch.equal(
        got["model.layers.0.mlp.up_proj.weight"], at_group["attention"]["model.layers.0.mlp.up_proj.weight"]
    )


def test_coefficients_per_group_are_checked(qwen_bf16, tmp_path):
    tv = task_vectors(qwen_bf16, tmp_path / "cache")
    lacking = {"sft": {"attention": 1.0, "mlp": 1.0, "norm": 1.0}, "rlvr": 1.0}
    with pytest.raises(DotsError, match=r"sft per module group.*missing \['embed_head'\]"):
        check_coefficients(tv, lacking)
    with pytest.raises(DotsError, match=r"unknown \['ffn'\]"):
        check_coefficients(tv, {"sft": {**PER_GROUP["sft"], "ffn": 1.0}, "rlvr": 1.0})
    with pytest.raises(DotsError, match=r"rlvr\.norm is not finite"):
        check_coefficients(tv, {"sft": 1.0, "rlvr": {**PER_GROUP["rlvr"], "norm": float("nan")}})
    # a source per group and one with a single λ mix; the order of the sources is the caller's
    assert list(check_coefficients(tv, {"rlvr": 0.5, "sft": PER_GROUP["sft"]})) == ["rlvr", "sft"]
    # a tensor without a group: the swap is refused before any weight is built
    odd = TaskVectors(tv.base_path, tv.entries, [*tv.names, "model.layers.0.vision_adapter.weight"], tv.copied)
    with pytest.raises(DotsError, match="vision_adapter"):
        check_coefficients(odd, PER_GROUP)
    check_coefficients(odd, {"sft": 1.0, "rlvr": 1.0})  # one λ per source never reads the names


@pytest.mark.parametrize("synth_cache", ["disk", "memory"])
def test_hf_engine_swaps_coefficients_per_group(qwen_bf16, tmp_path, synth_cache):
    from dots.engines.hf import HFEngine

    tv = task_vectors(qwen_bf16, tmp_path / "cache")
    expected = synthesize_dict(tv, PER_GROUP)
    engine = HFEngine(qwen_bf16.base, EngineOptions(device="cpu", synth_cache=synth_cache), task_vectors=tv)
    try:
        engine.swap_coefficients({"sft": 2.0, "rlvr": 2.0})
        engine.swap_coefficients(PER_GROUP)
        live = engine.state_dict()
        for name, tensor in expected.items():
            assert torch.equal(live[name], tensor), name
    finally:
        engine.close()


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_engine_swaps_coefficients_per_group_from_disk_and_memory(checkpoints):
    """The worker extension builds θ(λ per group) itself, from the τ̃ cache on disk and from its
    resident copy: the same weights as the synthesis streamed into the engine."""
    require_vllm()
    from dots.engines.vllm.engine import VLLMEngine
    from dots.vectors.synth import synthesize

    family = checkpoints(sft=TRIO_SOURCES["sft"], rlvr=TRIO_SOURCES["rl"])  # the trio's, keyed rlvr
    tv = family.tv
    engine = VLLMEngine(family.base, EngineOptions(synth_cache="disk", **SMALL_VLLM), task_vectors=tv)
    try:
        engine.swap_weights(synthesize(tv, PER_GROUP, device="cpu"))
        expected = engine.parameter_checksum()
        engine.swap_coefficients({"sft": 1.0, "rlvr": 1.0})
        assert engine.parameter_checksum() != expected
        engine.swap_coefficients(PER_GROUP)  # from disk
        assert engine.parameter_checksum() == expected
        engine.set_task_vectors(tv, synth_cache="memory")
        engine.swap_coefficients({"sft": 1.0, "rlvr": 1.0})
        engine.swap_coefficients(PER_GROUP)  # resident in the worker, in its fused parameters
        assert [i["layout"] for i in engine.resident_info()] == ["parameters"]
        assert engine.parameter_checksum() == expected
    finally:
        engine.close()


# --- the study's parameters -------------------------------------------------------------


def test_parameter_names_coefficients_and_fixed_points():
    assert param_names(["sft", "rlvr"]) == ["lambda_sft", "lambda_rlvr"]
    names = param_names(["sft", "rlvr"], "module")
    assert names == [f"lambda_{s}_{g}" for s in ("sft", "rlvr") for g in MODULE_GROUPS] and len(names) == 8
    params = {n: float(i) for i, n in enumerate(names)}
    assert coefficients_from_params(params, ["sft", "rlvr"], "module") == {
        "sft": {"attention": 0.0, "mlp": 1.0, "embed_head": 2.0, "norm": 3.0},
        "rlvr": {"attention": 4.0, "mlp": 5.0, "embed_head": 6.0, "norm": 7.0},
    }
    assert coefficients_from_params({"lambda_sft": 1, "lambda_rlvr": 0.5}, ["sft", "rlvr"]) == {"sft": 1.0, "rlvr": 0.5}
    assert fixed_point([1, 0.5], ["sft", "rlvr"], "module") == [1.0] * 4 + [0.5] * 4  # one λ for all four groups
    assert fixed_point(list(range(8)), ["sft", "rlvr"], "module") == [float(i) for i in range(8)]
    with pytest.raises(DotsError, match="need 2 coefficients .* or 8"):
        fixed_point([1, 2, 3], ["sft", "rlvr"], "module")
    with pytest.raises(DotsError, match="need 2 coefficients"):
        fixed_point([1, 2, 3], ["sft", "rlvr"], "model")
    with pytest.raises(DotsError, match="search.granularity must be one of model, module"):
        param_names(["sft"], "layer")


def test_interrupted_and_duplicate_points_keep_all_eight_coefficients():
    """The requeue of an interrupted trial and the duplicate check see all 8 parameters."""
    import optuna
    from optuna.trial import TrialState

    from dots.search.study.trials import point_key, set_aside_duplicate
    from dots.search.study.workers import RETRY_OF, recover_stale_trials

    names = param_names(["sft", "rlvr"], "module")
    storage = optuna.storages.InMemoryStorage()
    first = optuna.create_study(study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    cut = first.ask()
    point = {n: cut.suggest_float(n, 0, 2) for n in names}
    assert recover_stale_trials(first, -1.0, names) == [cut.number]
    (waiting,) = first.get_trials(states=(TrialState.WAITING,))
    assert waiting.system_attrs["fixed_params"] == point and waiting.user_attrs[RETRY_OF] == cut.number
    retry = first.ask()
    assert {n: retry.suggest_float(n, 0, 2) for n in names} == point and not set_aside_duplicate(first, retry, names)
    first.tell(retry, 1.0)
    again = optuna.load_study(study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    replayed = again.ask()  # a restarted seeded sampler proposes the scored point again
    assert {n: replayed.suggest_float(n, 0, 2) for n in names} == point
    assert set_aside_duplicate(again, replayed, names)
    seven_of_eight = {**point, names[-1]: point[names[-1]] / 2}
    assert point_key(seven_of_eight, names) != point_key(point, names)


# --- identity, options ------------------------------------------------------------------


def test_model_granularity_keeps_the_identity_of_runs_made_before_the_option(qwen_bf16):
    from omegaconf import open_dict

    from dots.keys import stable_hash
    from dots.search.identity import run_identity

    base = Checkpoint(qwen_bf16.base)
    sources = {k: Checkpoint(v) for k, v in qwen_bf16.sources.items()}
    cfg = compose(["backbone=lab", "engine=hf"])
    assert cfg.search.granularity == "model"
    before = compose(["backbone=lab", "engine=hf"])
    with open_dict(before):
        del before.search["granularity"]  # the config of a run made before search.granularity existed
    identity = stable_hash(run_identity(cfg, base, sources))
    assert identity == stable_hash(run_identity(before, base, sources))
    module = compose(["backbone=lab", "engine=hf", "search.granularity=module"])
    assert run_identity(module, base, sources)["search"]["granularity"] == "module"
    assert stable_hash(run_identity(module, base, sources)) != identity


def test_bad_granularity_is_one_line_and_writes_nothing(tmp_path):
    from dots.search.pipeline import run_search

    ovr = ["backbone=lab", "engine=hf", f"run_dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
    with pytest.raises(DotsError, match=r"^search\.granularity must be one of model, module, got 'layer'$"):
        run_search(compose([*ovr, "search.granularity=layer"]))
    done = subprocess.run(
        [sys.executable, "-m", "dots.search", *ovr, "search.granularity=per_tensor"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: search.granularity must be one of model, module, got 'per_tensor'"
    ]
    assert list(tmp_path.iterdir()) == []  # no run directory, no cache, no outputs


def test_card_lists_lambda_per_module_group():
    from dots.export.card import render_model_card

    card = render_model_card(
        method="dots",
        options={},
        base="b",
        sources={"sft": "s", "rlvr": "r"},
        weights={"sft": PER_GROUP["sft"], "rlvr": 0.25},
    )
    assert "| sft | `s` | — | per module group |" in card and "| rlvr | `r` | — | 0.25 |" in card
    assert "| source | attention | mlp | embed_head | norm |" in card and "| sft | 0.3 | 1.7 | 0.9 | 1.1 |" in card
    one = render_model_card(method="dots", options={}, base="b", sources={"sft": "s"}, weights={"sft": 0.5})
    assert "per module group" not in one and "| sft | `s` | — | 0.5 |" in one


# --- searches ---------------------------------------------------------------------------


def test_fixed_points_per_group_are_scored(tiny, tmp_path):
    """search.fixed with module granularity: 2 values (one per source, for all its groups) or 8."""
    eight = [1.0, 0.5, 1.5, 0.25, 0.0, 2.0, 1.0, 0.75]
    run_dir = run(
        overrides(
            tiny,
            tmp_path / "run",
            extra=[
                "search.granularity=module",
                f"search.fixed=[[1,0.5],{eight}]".replace(" ", ""),
                "search.range=[0.0,2.0]",  # the default [0.5, 2.0] would refuse the 0.25 and 0.0
            ],
        )
    )
    rows = list(csv.DictReader((run_dir / "fixed.csv").read_text().splitlines()))
    names = param_names(["sft", "rlvr"], "module")
    assert [[float(r[n]) for n in names] for r in rows] == [[1.0] * 4 + [0.5] * 4, eight]


@pytest.mark.slow
def test_lab_search_per_module_group_to_its_export(tmp_path):
    """backbone=lab, engine=hf, search.granularity=module to the end: 8 λ per trial, λ* per source
    and group in result.yaml, the export equal to the synthesis at λ* (bits), the card's table;
    a rerun with more trials extends the study without repeating a point."""
    import optuna

    from dots.search.pipeline import run_search

    small = [
        "backbone=lab",
        "engine=hf",
        "search.granularity=module",
        "search.n_startup_trials=2",
        "pool.size=16",
        "selection.n=4",
        "selection.m=2",
        "search.k=2",
        f"run_dir={tmp_path / 'run'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    cfg = compose([*small, "search.n_trials=3"])
    run_dir = run_search(cfg)
    names = param_names(["sft", "rlvr"], "module")
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{run_dir / 'study.db'}")
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 3 and all(sorted(t.params) == sorted(names) for t in trials)
    header = (run_dir / "trials.csv").read_text().splitlines()[0]
    assert header.startswith("number,state," + ",".join(names) + ",consistency,perplexity")

    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    lam = result["coefficients"]
    assert list(lam) == ["sft", "rlvr"] and all(list(v) == list(MODULE_GROUPS) for v in lam.values())
    picked = study.trials[result["trial"]].params
    assert lam == coefficients_from_params(picked, ["sft", "rlvr"], "module")
    assert all(isinstance(p["coefficients"]["sft"], dict) for p in result["front"])

    base = Checkpoint(str(cfg.backbone.base))
    tv = build_task_vectors(
        base,
        {k: Checkpoint(str(v)) for k, v in cfg.backbone.sources.items()},
        SparsifyConfig(),
        tmp_path / "cache" / "taskvec",  # cache_dir is the cache root: τ̃ under taskvec/
    )
    exported = Checkpoint(run_dir / "model")
    expected = synthesize_dict(tv, lam)
    assert set(exported.names) == set(expected)
    for name, tensor in expected.items():
        assert torch.equal(exported.get(name), tensor), name
    card = (run_dir / "model" / "README.md").read_text()
    assert "## Coefficients per module group" in card
    for source, groups in lam.items():
        assert f"| {source} | " + " | ".join(f"{groups[g]:.6g}" for g in MODULE_GROUPS) + " |" in card
    assert (run_dir / "pareto.png").exists() and (run_dir / "model" / "pareto.png").exists()

    run_search(compose([*small, "search.n_trials=5"]))
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 5 and all(sorted(t.params) == sorted(names) for t in trials)
    assert len({tuple(t.params.values()) for t in trials}) == 5
