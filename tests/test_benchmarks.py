"""benchmarks/ as questions: the listing is one package per question (plus the shared harness, the
shapes and the results), each package one door (`python -m benchmarks.<question> VARIANT`) whose
smallest run still runs here, every module imports, none is over 300 lines, no import circle.

Every subprocess runs from the checkout with it first on PYTHONPATH, as a user runs a benchmark.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
QUESTIONS = ("swap", "merge", "search", "pick", "grading", "scale", "gpu", "versions")
BESIDE = {"harness", "shapes", "results", "RESULTS.md", "__init__.py"}
MAX_LINES = 300

IMPORT_ALL = """
import importlib, json, sys, traceback
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def repo_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every .py under benchmarks/."""
    out = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(path: Path) -> set[str]:
    """The benchmarks modules `path` imports, at any depth of its code (a late import closes a circle too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks"):
            names.update({node.module, *(f"{node.module}.{a.name}" for a in node.names)})
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("benchmarks"))
    return names


def test_the_listing_is_the_questions():
    listed = {p.name for p in BENCHMARKS.iterdir() if p.name != "__pycache__"}
    assert listed == set(QUESTIONS) | BESIDE
    for question in QUESTIONS:
        assert (BENCHMARKS / question / "__main__.py").is_file(), question


def test_every_benchmark_module_imports():
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *modules()], capture_output=True, text=True, env=repo_env(), cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())


def test_no_benchmark_module_over_300_lines():
    long = {n: c for n, p in modules().items() if (c := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_import_circle_in_benchmarks():
    found = modules()
    graph = {name: {m for m in imported(path) if m in found and m != name} for name, path in found.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done:
            return None
        for nxt in sorted(graph[name]):
            if cycle := visit(nxt, [*path, name]):
                return cycle
        done.add(name)
        return None

    cycles = [c for name in sorted(graph) if (c := visit(name, []))]
    assert cycles == []


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


@pytest.mark.parametrize("question", QUESTIONS)
def test_every_variant_is_a_module_or_script_that_exists(question):
    package = importlib.import_module(f"benchmarks.{question}")
    assert package.VARIANTS
    for name, variant in package.VARIANTS.items():
        if variant.script is not None:
            assert variant.script.is_file(), name
        else:
            assert variant.target in modules(), name
    for argv in [*package.SMOKE, *getattr(package, "SLOW_SMOKE", [])]:
        assert argv[0] in package.VARIANTS


def smokes(slow: bool) -> list:
    marks = [pytest.mark.slow] if slow else []
    return [
        pytest.param(q, argv, id=f"{q}-{argv[0]}", marks=marks)
        for q in QUESTIONS
        for argv in getattr(importlib.import_module(f"benchmarks.{q}"), "SLOW_SMOKE" if slow else "SMOKE", [])
    ]


@pytest.mark.parametrize(("question", "argv"), smokes(False) + smokes(True))
def test_every_question_runs_its_smallest_case(question, argv, tmp_path):
    """The door, the variant and the benchmark's own code run end to end at the smallest size."""
    if question == "versions" and not (REPO / ".git").exists():
        pytest.skip("byte identity checks out commits: needs a git checkout")
    args = [a.format(tmp=tmp_path, repo=REPO) for a in argv]
    env = {**repo_env(), "DOTS_OUTPUTS": str(tmp_path / "outputs"), "DOTS_PROGRESS": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{question}", *args], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip(), "the benchmark printed nothing"


def variants() -> list:
    return [
        pytest.param(q, name, id=f"{q}-{name}")
        for q in QUESTIONS
        for name in importlib.import_module(f"benchmarks.{q}").VARIANTS
    ]


@pytest.mark.parametrize(("question", "variant"), variants())
def test_every_variant_answers_help_and_writes_nothing(question, variant, tmp_path):
    """`python -m benchmarks.Q VARIANT --help` prints its usage and exits 0, a script variant too (a
    script once took --help for its results file and ran the whole GPU check)."""
    status = ["git", "status", "--porcelain", "--untracked-files=all", "--", "benchmarks"]  # results files
    before = subprocess.run(status, capture_output=True, text=True, cwd=REPO).stdout
    env = {**repo_env(), "DOTS_OUTPUTS": str(tmp_path / "outputs")}
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{question}", variant, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower() or variant in proc.stdout, proc.stdout[:500]
    assert list(tmp_path.iterdir()) == [] and not (REPO / "--help").exists()
    assert subprocess.run(status, capture_output=True, text=True, cwd=REPO).stdout == before


def test_an_unknown_variant_names_the_choices():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.swap", "nope"], capture_output=True, text=True, env=repo_env(), cwd=REPO
    )
    assert proc.returncode != 0 and "latency" in proc.stderr


def test_the_graders_worker_imports_with_the_standard_library_alone():
    """benchmarks/grading/worker.py runs as a script inside the peers' venvs, which hold neither dots nor torch."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import worker"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code, str(BENCHMARKS / "grading")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
