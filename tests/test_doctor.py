"""`python -m dots.doctor` end to end on this CPU: the lab and a generated Qwen2.5-0.5B-shaped
model (2 layers, its real widths) with both engines are ready (exit 0); a swap broken on
purpose gives exit 1 and one FAIL line; an unknown backbone exit 2 and one error line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require_vllm

REPO = Path(__file__).resolve().parent.parent
QWEN_05B = REPO / "benchmarks" / "shapes" / "qwen2.5-0.5b.json"
ENGINES = ["hf", pytest.param("vllm", marks=pytest.mark.vllm)]  # vLLM: `require_vllm` (fails in CI if missing)


def doctor(tmp_path: Path, *args: str, broken: str | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DOTS_PROGRESS": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("DOTS_BREAK_SWAP", None)
    if broken:
        env["DOTS_BREAK_SWAP"] = broken
    cmd = [sys.executable, "-m", "dots.doctor", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)


def rows(out: str) -> dict[str, str]:
    """The verdict table: check name → status and detail."""
    table = out.split("dots doctor:", 1)[1].splitlines()[1:]
    return {line[2:16].strip(): line[16:].strip() for line in table if line.startswith("  ")}


def assert_ready(proc: subprocess.CompletedProcess) -> dict[str, str]:
    out = proc.stdout
    assert proc.returncode == 0, (out + proc.stderr)[-4000:]
    assert out.rstrip().endswith("verdict: ready") and "FAIL" not in out
    table = rows(out)
    for check in ("torch", "transformers", "memory plan", "engine start", "swap canary", "swap path", "swaps"):
        assert check in table, table
    assert table["swap canary"].startswith("ok") and "tolerance 0" in table["swap canary"]
    assert table["swap path"].startswith("ok    swap path: fast")
    assert len(table["swaps"].split("swaps ")[1].split(" ms")[0].split("/")) == 3
    return table


@pytest.mark.parametrize("engine", ENGINES)
def test_doctor_lab(tmp_path, engine):
    if engine == "vllm":
        require_vllm()
    table = assert_ready(doctor(tmp_path, "backbone=lab", f"engine={engine}"))
    assert table["model"].startswith("qwen2 tiny shapes, 2 layers")


@pytest.mark.parametrize("engine", ENGINES)
def test_doctor_qwen25_shaped(tmp_path, engine):
    if engine == "vllm":
        require_vllm()
    args = ["--shapes", str(QWEN_05B), "--shape", "real", "--layers", "2", "backbone=lab", f"engine={engine}"]
    if engine == "vllm":
        # float32, as test_canary's vLLM cases: vLLM-CPU's bfloat16 GEMMs on an AMX CPU (Sapphire Rapids)
        # gave the same weights log-probs 3e-4 to 8e-4 nats/token apart from one call to the next, which
        # the CPU's zero tolerance refuses (docs/compatibility.md, "Known limit")
        args.append("engine.dtype=float32")
    table = assert_ready(doctor(tmp_path, *args))
    assert "qwen2 real shapes, 2 layers" in table["model"] and "896" in table["model"] and "tied" in table["model"]
    assert "494.0 M parameters" in table["memory plan"]  # the plan is the real 0.5B's, from its config


def test_a_broken_swap_is_one_fail_line_and_exit_1(tmp_path):
    proc = doctor(tmp_path, "backbone=lab", "engine=hf", broken="copy-params")
    assert proc.returncode == 1, proc.stdout[-3000:]
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith("FAIL swap canary: fell back:") and "public path" in fails[0]
    assert proc.stdout.rstrip().endswith("verdict: not ready (1 check(s) failed)")


def test_a_bad_backbone_is_one_line_and_exit_2(tmp_path):
    proc = doctor(tmp_path, "backbone=nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
