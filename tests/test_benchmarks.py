"""benchmarks/ under the bounds of dots/: every module imports (so a benchmark broken by a change in
dots shows here, not when someone next runs it), none is over 300 lines, and every script that
defines `main` runs it when started.

The imports run in one subprocess with benchmarks/ first on sys.path, as `python benchmarks/<name>.py`
has it, so that the benchmarks' top-level module names (`harness`, `swap_model`, ...) never
enter this process.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
MAX_LINES = 300

IMPORT_ALL = """
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
failed = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def modules() -> dict[str, Path]:
    """Module name (as benchmarks/ on sys.path sees it) → file, for every .py under benchmarks/."""
    out = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        parts = list(path.relative_to(BENCHMARKS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def test_the_scan_sees_the_benchmarks_and_their_harness():
    found = modules()
    assert {"swap_latency", "lab_samplers", "harness", "harness.checkpoints", "harness.timing"} <= set(found)


def test_every_benchmark_module_imports():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, str(BENCHMARKS), *modules()],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())


def test_no_benchmark_module_over_300_lines():
    long = {n: c for n, p in modules().items() if (c := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_script_with_a_main_runs_it():
    silent = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        defines_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
        guarded = any(
            isinstance(n, ast.If)
            and "__main__" in ast.unparse(n.test)
            and any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == "main" for c in ast.walk(n))
            for n in tree.body
        )
        if defines_main and not guarded:
            silent.append(name)
    assert silent == []


def test_the_graders_worker_imports_with_the_standard_library_alone():
    """graders_vs_peers.py runs as `--worker` inside the peers' venvs, which hold neither dots nor torch."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import graders_vs_peers"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code, str(BENCHMARKS)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
