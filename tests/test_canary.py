"""The swap canary through the real CLI (`python -m dots.search` on the lab trio, both engines):
it passes bit for bit on a sound swap and lands in canary.yaml, result.yaml and the model card;
a fast swap broken on purpose (`DOTS_BREAK_SWAP`: writes into a copy of the parameters) is
caught, the run says so in one line, falls back to the public loading path and goes on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import require_vllm, vllm_cpu_gemm_reads_its_weight

from dots.engines.canary import CPU_TOLERANCE, CUDA_TOLERANCE

REPO = Path(__file__).resolve().parent.parent
SMALL = [  # the smallest lab search: random selection, one trial of one sample of 4 tokens
    "selection.strategy=random",
    "selection.n=2",
    "selection.m=1",
    "search.k=1",
    "search.n_trials=1",
    "search.n_startup_trials=1",
    "backbone.max_tokens=4",
]
VLLM = ["engine.enforce_eager=true", "engine.gpu_memory_utilization=0.1"]


def search(tmp_path: Path, engine: str, *extra: str, broken: str | None = None) -> tuple[Path, str]:
    """Run `python -m dots.search backbone=lab engine=<engine>` small; (run dir, its output)."""
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "DOTS_OUTPUTS": str(tmp_path / "outputs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("DOTS_BREAK_SWAP", None)
    if broken:
        env["DOTS_BREAK_SWAP"] = broken
    cmd = [sys.executable, "-m", "dots.search", "backbone=lab", f"engine={engine}", f"run_dir={run_dir}", *SMALL]
    cmd += [*(VLLM if engine == "vllm" else []), *extra]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return run_dir, out


def canary_of(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "canary.yaml").read_text())


def engine_device(out: str) -> str:
    """The device the run's engine ran on, as its memory plan says ("engine hf on cuda, …")."""
    found = re.search(r"; engine \w+ on (\w+)", out)
    assert found, out[-2000:]
    return found.group(1)


def assert_passed_everywhere(run_dir: Path, out: str) -> None:
    canary = canary_of(run_dir)
    assert canary["verdict"] == "passed" and canary["path"] == "fast" and canary["failures"] == []
    expected = CPU_TOLERANCE if engine_device(out) == "cpu" else CUDA_TOLERANCE  # CPU: bit for bit
    assert canary["tolerance"] == expected and len(canary["nll_fresh"]) == 3
    assert f"swap canary: passed, path fast, {canary['seconds']:.1f} s" in out
    cell = f"passed (fast path, {canary['seconds']:.1f} s)"
    assert yaml.safe_load((run_dir / "result.yaml").read_text())["swap_canary"] == cell
    assert f"| swap canary | {cell} |" in (run_dir / "model" / "README.md").read_text()


# the first line of each of the canary's three checks (dots.engines.canary.check_swaps)
AT_ZERO = "λ=0 differs from the freshly loaded θ0"
UNCHANGED = "λ=0.5 leaves the log-probs of θ0 unchanged"
PUBLIC_DIFFERS = "λ=0.5 through the public loading path differs from the fast one"


def assert_caught(run_dir: Path, out: str, check: str) -> None:
    """The canary caught the broken swap by `check` first, fell back to the public path (where
    every check passes) and the run went on."""
    canary = canary_of(run_dir)
    assert canary["verdict"] == "fell back" and canary["path"] == "public", canary
    assert canary["failures"] and canary["failures"][0].startswith(check), canary
    switched = [line for line in out.splitlines() if "the fast swap failed" in line]
    assert len(switched) == 1 and "switching to the public loading path" in switched[0]
    assert "swap canary: fell back, path public" in out
    assert (run_dir / "study.db").is_file()  # the run went on, on the public path


def test_hf_canary_passes_bit_for_bit_and_is_in_result_and_card(tmp_path):
    run_dir, out = search(tmp_path, "hf")
    assert_passed_everywhere(run_dir, out)


def test_hf_canary_catches_a_copy_of_the_parameters_through_the_cli(tmp_path):
    """A write into a copy of the parameters: nothing reaches the model, so λ = 0.5 leaves θ0's
    log-probs as they were (check 2)."""
    run_dir, out = search(tmp_path, "hf", "search.fixed=[[0.5,0.5]]", broken="copy-params")
    assert_caught(run_dir, out, UNCHANGED)


@pytest.mark.slow
def test_hf_canary_runs_again_after_the_engine_restarts(tmp_path):
    """A resumed run starts its engine again, and that start is checked too: the first run's
    canary passed; the swap broken before the second start is caught by the second canary."""
    run_dir, out = search(tmp_path, "hf")
    assert canary_of(run_dir)["verdict"] == "passed" and out.count("swap canary:") == 1
    run_dir, out = search(tmp_path, "hf", "search.n_trials=2", broken="copy-params")
    trials = (run_dir / "trials.csv").read_text().splitlines()
    assert len(trials) == 1 + 2  # the second trial ran, on the restarted engine
    assert_caught(run_dir, out, UNCHANGED)


@pytest.mark.vllm
def test_vllm_canary_passes_bit_for_bit_and_is_in_result_and_card(tmp_path):
    require_vllm()
    run_dir, out = search(tmp_path, "vllm")
    assert_passed_everywhere(run_dir, out)


# float32 weights (the lab's own dtype; vLLM-CPU would downcast to bfloat16): where this CPU's
# oneDNN packs them, the forward pass reads a packed copy that only the repack refreshes
BROKEN = ["search.fixed=[[0.5,0.5]]", "engine.dtype=float32"]


@pytest.mark.vllm
def test_vllm_canary_catches_a_copy_of_the_parameters_through_the_cli(tmp_path):
    """Where vLLM packs its GEMM weights, it rebuilds them from the parameters after each write, so
    the copy's values still move the log-probs at λ = 0.5 — but not to where the public path puts
    them (check 3). Where the GEMM reads the parameters, nothing reaches the model (check 2)."""
    require_vllm()
    run_dir, out = search(tmp_path, "vllm", *BROKEN, broken="copy-params")
    assert_caught(run_dir, out, UNCHANGED if vllm_cpu_gemm_reads_its_weight(torch.float32) else PUBLIC_DIFFERS)


@pytest.mark.vllm
def test_vllm_canary_catches_a_skipped_repack_through_the_cli(tmp_path):
    """The write reaches the parameters but vLLM's post-load processing (the packed GEMM weights
    the forward pass reads on CPU) is skipped: the layers that read their parameters directly move
    the log-probs, the packed ones do not — not where the public path puts them (check 3). A CPU
    whose GEMM reads the parameters themselves has nothing to repack: there the canary passes."""
    require_vllm()
    run_dir, out = search(tmp_path, "vllm", *BROKEN, broken="skip-repack")
    if vllm_cpu_gemm_reads_its_weight(torch.float32):  # nothing packed on this CPU: the skip is harmless
        assert_passed_everywhere(run_dir, out)
    else:
        assert_caught(run_dir, out, PUBLIC_DIFFERS)


def test_a_fast_swap_with_wrong_values_is_caught_only_by_the_public_path_check(tmp_path):
    """In process, on the transformers engine: a fast swap that writes θ0 at λ = 0 and reaches the
    model, but with λ 1.5 times too large, passes checks 1 and 2; only the comparison with the
    public loading path (check 3) catches it, and the engine falls back to that path."""
    from helpers import lab_scorer

    from dots.engines.canary import run_canary

    engine = lab_scorer(tmp_path / "cache", k=1, queries=1).engine
    try:
        swap = engine.swap_coefficients

        def off(coefficients):
            scale = 1.5 if engine.swap_path == "fast" else 1.0
            swap({k: scale * v for k, v in coefficients.items()})

        engine.swap_coefficients = off
        canary = run_canary(engine, ["sft", "rlvr"], tmp_path)
        assert canary.failures[0].startswith(PUBLIC_DIFFERS) and len(canary.failures) == 1, canary.failures
        assert canary.verdict == "fell back" and engine.swap_path == "public"
    finally:
        engine.close()
