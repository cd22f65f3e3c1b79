"""The memory plan (dots.plan, python -m dots.plan) and synth_cache=auto."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from helpers import REPO, overrides, run_cli

import dots.runtime.devices
import dots.vectors.residency
from dots.errors import DotsError
from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.io.shapes import ModelShapes
from dots.options.engine import EngineOptions
from dots.plan.decide import EngineSetting, plan_memory
from dots.plan.render import describe
from dots.runtime.devices import DeviceMemory
from dots.vectors.cache import build_task_vectors
from dots.vectors.residency import MARGIN, resident_bytes, resident_needs, resolve_resident, resolve_synth_cache
from dots.vectors.sparsify import SparsifyConfig
from dots.vectors.synth import ResidentSynthesizer

SHAPES = REPO / "benchmarks" / "shapes"
GB = 10**9


def gpu(gb: float) -> DeviceMemory:
    return DeviceMemory(int(gb * GB), int(gb * GB), "given")


@pytest.fixture(scope="module")
def trio(tiny):
    """The search family's bf16 base with its sft and rlvr sources (conftest's `tiny`)."""
    root, base, srcs, _ = tiny
    return root, base, {k: srcs[k] for k in ("sft", "rlvr")}


def test_shapes_from_a_config_json_count_the_real_models():
    """Qwen2.5-7B and Llama-3-70B have 7 615 616 512 and 70 553 706 496 parameters."""
    qwen = ModelShapes.from_config_file(SHAPES / "qwen2.5-7b.json")
    llama = ModelShapes.from_config_file(SHAPES / "llama-3-70b.json")
    assert qwen.params == 7_615_616_512 and llama.params == 70_553_706_496
    assert qwen.nbytes == 2 * qwen.params and "model.layers.0.self_attn.q_proj.bias" in qwen.tensors
    assert "model.layers.0.self_attn.q_proj.bias" not in llama.tensors
    assert qwen.kv_bytes_per_token(torch.bfloat16) == 2 * 28 * 4 * 128 * 2
    assert llama.kv_bytes_per_token(torch.bfloat16, 8) == 2 * 80 * 1 * 128 * 2  # 8 KV heads over 8 GPUs
    assert llama.kv_bytes_per_token(torch.bfloat16, 16) == 2 * 80 * 1 * 128 * 2  # replicated beyond 8
    with pytest.raises(DotsError, match="model_type"):
        ModelShapes.from_config({"model_type": "gpt2"})


def test_shapes_from_a_config_equal_the_checkpoints(trio):
    root, base, sources = trio
    ckpt = Checkpoint(base)
    derived = ModelShapes.from_config_file(base)
    exact = ModelShapes.from_alignment(align(ckpt, {k: Checkpoint(v) for k, v in sources.items()}))
    assert {n: i.shape for n, i in derived.tensors.items()} == {n: i.shape for n, i in exact.tensors.items()}
    assert (
        (derived.layers, derived.kv_heads, derived.head_dim)
        == (exact.layers, exact.kv_heads, exact.head_dim)
        == (2, 1, 32)
    )


def test_the_plans_resident_bytes_are_what_the_resident_synthesizer_holds(trio):
    """For every resident form, the figure from the cache's own τ̃ sizes (`resident_needs`) is
    ResidentSynthesizer.nbytes exactly (θ0 + τ̃ + scratch; dense and sparse write into the transformers
    engine's parameters, the bitmask form holds one output per tensor from its first swap on); estimated from
    the density alone, the plan's figure is within a few percent."""
    root, base, sources = trio
    ckpt = Checkpoint(base)
    tv = build_task_vectors(ckpt, {k: Checkpoint(v) for k, v in sources.items()}, SparsifyConfig(), root / "cache")
    needs = resident_needs(tv, torch.device("cpu"))
    shapes = ModelShapes.from_alignment(align(ckpt, {k: Checkpoint(v) for k, v in sources.items()}))
    estimated = plan_memory(shapes, EngineSetting("hf", "cpu"), gpu(100), 2, 0.3)
    tensors = {n: ckpt.info(n) for n in ckpt.names}
    for form in ("dense", "sparse", "index", "bitmask"):
        resident = ResidentSynthesizer(tv, device="cpu", form=form)
        tau = sum(t.nbytes for per in resident.taus.values() for t in per.values())
        assert resident_bytes(tensors, tv.names, {}, tau, "cpu", outputs=False) == resident.nbytes
        assert needs[form] == resident.nbytes, form  # the transformers engine writes into its parameters
        for _ in resident({"sft": 1.0, "rlvr": 0.5}):
            pass  # a swap without live targets (from the cache's path) holds one output per tensor
        assert resident_bytes(tensors, tv.names, {}, tau, "cpu", outputs=True) == resident.nbytes
        assert 0.97 * needs[form] <= estimated.forms[form][1] <= 1.05 * needs[form], form
    assert needs["dense"] > needs["sparse"] > needs["index"] > needs["bitmask"]
    assert estimated.resident_form == "dense" and estimated.resident == estimated.forms["dense"][1]


def test_qwen7b_on_one_80gb_gpu_keeps_tau_resident_and_sets_vllms_share():
    shapes = ModelShapes.from_config_file(SHAPES / "qwen2.5-7b.json")
    setting = EngineSetting("vllm", "cuda", sequences=8, max_tokens=8192)
    plan = plan_memory(shapes, setting, gpu(80), 2, 0.3)
    assert plan.synth_cache == "memory" and plan.resident_form == "bitmask"  # dense: 91 GB, sparse: 67 GB
    assert 0.72 < plan.tau / shapes.params / 2 <= 0.75  # 1/8 + 0.3 × 2 = 0.725 bytes per parameter per source
    assert plan.forms["dense"][0] == 4 * 2 * sum(shapes.tensors[n].numel for n in shapes.merged)
    assert 2.39 < plan.forms["sparse"][0] / shapes.params / 2 <= 2.41  # 8 bytes per kept entry at density 0.3
    assert plan.utilization is not None and plan.utilization * 80 * GB + plan.resident + MARGIN <= 80 * GB
    assert plan.utilization * 80 * GB >= plan.engine
    options = plan.engine_options(EngineOptions(name="vllm", gpu_memory_utilization=None, synth_cache="auto"))
    assert options.synth_cache == "memory" and options.gpu_memory_utilization == round(plan.utilization, 4)
    assert options.resident_form == "bitmask"
    assert any("synth_cache=memory" in line for line in describe(plan))


def test_70b_at_tp8_keeps_each_ranks_shard_of_tau_resident():
    """vLLM workers hold only their shard of θ0 and τ̃ (dots.engines.vllm.resident): at TP=8 a
    70B model's 141 GB of θ0 and 102 GB of compact τ̃ are 1/8 per GPU, beside the engine."""
    shapes = ModelShapes.from_config_file(SHAPES / "llama-3-70b.json")
    setting = EngineSetting("vllm", "cuda", tensor_parallel=8, max_tokens=8192)
    plan = plan_memory(shapes, setting, gpu(80), 2, 0.3)
    assert plan.synth_cache == "memory" and plan.weights == shapes.nbytes // 8
    theta0 = sum(shapes.tensors[n].nbytes for n in shapes.merged)
    assert plan.resident == (theta0 + plan.tau) // 8 + theta0 // 8  # + the set-up's second θ0 shard
    assert plan.utilization is not None and plan.utilization * 80 * GB + plan.resident + MARGIN <= 80 * GB
    one = plan_memory(shapes, EngineSetting("vllm", "cuda", tensor_parallel=1, max_tokens=8192), gpu(2000), 2, 0.3)
    assert 0.124 < plan.resident / one.forms["bitmask"][1] < 0.126  # TP=8 holds 1/8 of TP=1 per GPU
    # dense (70 GB of τ̃ per GPU) and sparse (42 GB) do not fit beside the engine: the bitmask form
    assert plan.resident_form == "bitmask" and one.resident_form == "dense"
    assert any("resident_form=bitmask" in line and "sparse would need" in line for line in describe(plan))
    assert any("/ tensor_parallel_size 8" in line and "τ̃ resident" in line for line in describe(plan))


def test_fits_resident_disk_or_nothing():
    shapes = ModelShapes.from_config_file(SHAPES / "qwen2.5-7b.json")
    hf = EngineSetting("hf", "cuda", sequences=16, max_tokens=1024)
    assert plan_memory(shapes, hf, gpu(80), 2, 0.3).synth_cache == "memory"
    assert plan_memory(shapes, hf, gpu(40), 2, 0.3).synth_cache == "disk"
    with pytest.raises(DotsError) as err:
        plan_memory(shapes, hf, gpu(20), 2, 0.3)
    message = str(err.value)
    assert "\n" not in message and "does not fit" in message and "> 20.0 GB free" in message
    assert "τ̃ from the cache" in message and "(resident: " in message
    # an explicit choice is checked, not overridden
    with pytest.raises(DotsError, match="synth_cache=auto or disk"):
        plan_memory(shapes, EngineSetting("hf", "cuda", synth_cache="memory"), gpu(40), 2, 0.3)
    assert plan_memory(shapes, EngineSetting("hf", "cuda", synth_cache="disk"), gpu(80), 2, 0.3).synth_cache == "disk"
    # vLLM with its share fixed: dots gets what is left
    fixed = EngineSetting("vllm", "cuda", utilization=0.9, max_model_len=16384)
    assert plan_memory(shapes, fixed, gpu(80), 2, 0.3).synth_cache == "disk"
    with pytest.raises(DotsError, match="vLLM's share"):
        plan_memory(shapes, EngineSetting("vllm", "cuda", utilization=0.2), gpu(80), 2, 0.3)


def test_cpu_workers_share_the_host():
    """vLLM-CPU workers share the host: each holds its half of θ0 and τ̃, so TP=2 needs about
    what TP=1 does (when each worker held the whole model, TP=2 did not fit in 70 GB)."""
    shapes = ModelShapes.from_config_file(SHAPES / "qwen2.5-7b.json")
    one = plan_memory(shapes, EngineSetting("vllm", "cpu", max_model_len=4096), gpu(70), 2, 0.3)
    assert one.synth_cache == "memory" and one.utilization is None
    two = plan_memory(shapes, EngineSetting("vllm", "cpu", tensor_parallel=2, max_model_len=4096), gpu(70), 2, 0.3)
    assert two.synth_cache == "memory" and abs(2 * two.resident - one.resident) < 0.01 * one.resident
    with pytest.raises(DotsError, match="does not fit"):  # two workers of 7.6 B on a 30 GB host
        plan_memory(
            shapes,
            EngineSetting("vllm", "cpu", tensor_parallel=2, max_model_len=4096, synth_cache="memory"),
            gpu(30),
            2,
            0.3,
        )


def test_engine_auto_resolves_from_free_memory(trio, monkeypatch):
    root, base, sources = trio
    tv = build_task_vectors(
        Checkpoint(base), {k: Checkpoint(v) for k, v in sources.items()}, SparsifyConfig(), root / "cache"
    )
    assert resolve_synth_cache("disk", tv, torch.device("cpu")) == "disk"
    assert resolve_synth_cache("auto", tv, torch.device("cpu")) == "memory"
    needs = resident_needs(tv, torch.device("cpu"))
    between = MARGIN + (needs["sparse"] + needs["dense"]) // 2  # room for sparse, not for dense
    monkeypatch.setattr(dots.vectors.residency, "meminfo", lambda: {"MemAvailable": between, "MemTotal": between})
    assert resolve_resident("auto", "auto", tv, torch.device("cpu")) == ("memory", "sparse")
    assert resolve_resident("memory", "dense", tv, torch.device("cpu")) == ("memory", "dense")  # as asked
    assert resolve_resident("auto", "dense", tv, torch.device("cpu")) == ("disk", "dense")  # does not fit
    monkeypatch.setattr(dots.vectors.residency, "meminfo", lambda: {"MemAvailable": 10**6, "MemTotal": 10**6})
    assert resolve_synth_cache("auto", tv, torch.device("cpu")) == "disk"
    assert resolve_resident("memory", "auto", tv, torch.device("cpu")) == ("memory", "bitmask")  # the smallest
    from dots.engines.hf import HFEngine

    engine = HFEngine(base, EngineOptions(device="cpu"), task_vectors=tv)
    try:
        assert engine.synth_cache == "auto" and engine._resident is None  # too little free: from the cache
        monkeypatch.undo()
        engine.set_task_vectors(tv)
        assert engine._resident is not None
    finally:
        engine.close()


# --- through the search and the CLI -----------------------------------------------------------


def search_overrides(tiny, run_dir: Path) -> list[str]:
    """A two-trial search of the tiny family with its own τ̃ cache beside the run directory."""
    small = ["engine.device=cpu", "backbone.max_tokens=4", "selection.n=2", "search.n_startup_trials=1"]
    return overrides(tiny, run_dir, trials=2, extra=[*small, f"cache_dir={run_dir}-cache", "export.enabled=false"])


def test_search_that_cannot_fit_stops_before_writing_anything(tiny, tmp_path, monkeypatch, capsys):
    from dots.options.compose import compose
    from dots.search.pipeline import run_search

    monkeypatch.setattr(
        dots.runtime.devices, "device_memory", lambda device, count=1: DeviceMemory(10**6, 10**6, "test")
    )
    run_dir = tmp_path / "run"
    with pytest.raises(DotsError, match="memory plan: does not fit on cpu"):
        run_search(compose("search", search_overrides(tiny, run_dir)))
    assert not run_dir.exists() and not Path(f"{run_dir}-cache").exists()


@pytest.mark.parametrize("fits", ["disk", "sparse"])
def test_search_prints_its_plan_and_gives_the_engine_the_choice(trio, tiny, tmp_path, monkeypatch, capsys, fits):
    """Room for one tensor at a time but not for any resident copy: the engine reads τ̃ from
    the cache (synth_cache=disk reaches it); room for the sparse form but not the dense one:
    the engine holds τ̃ sparse. The run completes either way."""
    from dots.engines import factory
    from dots.options.compose import compose
    from dots.search.pipeline import run_search

    shapes = ModelShapes.from_config_file(trio[1])
    setting = EngineSetting("hf", "cpu", sequences=16, max_tokens=4)
    engine_only = plan_memory(shapes, setting, gpu(100), 2, 0.3)
    below, above = {"disk": (engine_only.stream, "bitmask"), "sparse": (engine_only.forms["sparse"][1], "dense")}[fits]
    room = engine_only.engine + MARGIN + (below + engine_only.forms[above][1]) // 2
    monkeypatch.setattr(dots.runtime.devices, "device_memory", lambda device, count=1: DeviceMemory(room, room, "test"))
    seen = []
    real = factory.build_engine
    monkeypatch.setattr(
        factory, "build_engine", lambda cfg, *a, **k: seen.append(dict(vars(cfg))) or real(cfg, *a, **k)
    )
    run_search(compose("search", search_overrides(tiny, tmp_path / "run")))
    out = capsys.readouterr().out
    if fits == "disk":
        assert "memory plan:" in out and "synth_cache=disk:" in out
        assert seen and seen[0]["synth_cache"] == "disk"
    else:
        assert "synth_cache=memory, resident_form=sparse: " in out and "dense would need" in out
        assert seen and seen[0]["synth_cache"] == "memory" and seen[0]["resident_form"] == "sparse"


def test_resident_form_auto_picks_the_fastest_that_fits_and_a_forced_one_is_checked():
    shapes = ModelShapes.from_config_file(SHAPES / "qwen2.5-7b.json")
    hf = EngineSetting("hf", "cuda", sequences=16, max_tokens=1024)
    picks = {gb: plan_memory(shapes, hf, gpu(gb), 2, 0.3) for gb in (120, 90, 70, 55, 40)}
    assert [(p.synth_cache, p.resident_form) for p in picks.values()] == [
        ("memory", "dense"),  # 77.2 GB beside the engine's 21.1
        ("memory", "sparse"),  # 52.9
        ("memory", "index"),  # 43.7
        ("memory", "bitmask"),  # 27.3
        ("disk", None),
    ]
    assert picks[90].resident == picks[90].forms["sparse"][1] and picks[90].tau == picks[90].forms["sparse"][0]
    # forced: held when it fits (even if a faster one would), one line when it does not
    forced = plan_memory(shapes, EngineSetting("hf", "cuda", resident_form="bitmask"), gpu(120), 2, 0.3)
    assert (forced.synth_cache, forced.resident_form) == ("memory", "bitmask") and "as configured" in forced.reason
    with pytest.raises(DotsError) as err:
        plan_memory(shapes, EngineSetting("hf", "cuda", resident_form="dense"), gpu(90), 2, 0.3)
    message = str(err.value)
    assert "\n" not in message and "τ̃ resident (dense form)" in message and "resident_form=auto" in message
    with pytest.raises(DotsError, match="use synth_cache=memory or auto"):
        plan_memory(shapes, EngineSetting("hf", "cuda", synth_cache="disk", resident_form="sparse"), gpu(120), 2, 0.3)
    options = picks[40].engine_options(EngineOptions(name="hf", synth_cache="auto", resident_form="auto"))
    assert options.synth_cache == "disk" and options.resident_form == "auto"
    with pytest.raises(DotsError, match="resident_form must be one of"):
        plan_memory(shapes, EngineSetting("hf", "cuda", resident_form="csr"), gpu(120), 2, 0.3)


def run_plan(*args: str) -> subprocess.CompletedProcess:
    return run_cli("dots.plan", *args, timeout=300)


def test_plan_cli_from_a_config_json():
    proc = run_plan(
        "--shapes", str(SHAPES / "qwen2.5-7b.json"), "--device-memory-gb", "80", "backbone=qwen7b", "engine=vllm"
    )
    assert proc.returncode == 0, proc.stderr
    assert "7.62 B parameters" in proc.stdout and "synth_cache=memory" in proc.stdout
    proc = run_plan(
        "--shapes",
        str(SHAPES / "llama-3-70b.json"),
        "--device-memory-gb",
        "80",
        "backbone=qwen7b",
        "engine=vllm",
        "engine.tensor_parallel_size=8",
    )
    assert proc.returncode == 0, proc.stderr
    assert "synth_cache=memory" in proc.stdout and "tensor_parallel_size 8" in proc.stdout
    proc = run_plan(
        "--shapes", str(SHAPES / "llama-3-70b.json"), "--device-memory-gb", "80", "backbone=qwen7b", "engine=vllm"
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: memory plan")
