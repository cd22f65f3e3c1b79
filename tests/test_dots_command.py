"""The `dots` console script: `dots VERB ARGS` gives the same stdout, stderr and exit code as
`python -m dots.VERB ARGS`; `dots --help` lists every verb; an unknown verb is one line, exit 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dots.options.cli import VERBS

REPO = Path(__file__).resolve().parent.parent
# what pip's generated `dots` script does (pyproject's [project.scripts] dots = "dots.options.cli:main")
DOTS = [sys.executable, "-c", "import sys; from dots.options.cli import main; sys.exit(main())"]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0", "DOTS_OUTPUTS": str(cwd / "outputs")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["search", "--help"], 0),
        (["search", "backbone=qwen7b", "--cfg", "job"], 0),
        (["search", "no_such_key=1"], 2),
        (["merge", "--help"], 0),
        (["merge", "method=ties", "--cfg", "job"], 2),
        (["evaluate", "--cfg", "job"], 0),
        (["plan", "--device", "tpu"], 2),
        (["io", "--help"], 0),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else str(a),
)
def test_dots_verb_is_python_m_dots_verb(args, code, tmp_path):
    ours = run([*DOTS, *args], tmp_path)
    theirs = run([sys.executable, "-m", f"dots.{args[0]}", *args[1:]], tmp_path)
    assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    assert ours.returncode == code and (ours.stdout or ours.stderr)  # the verb ran and said something


def test_help_lists_every_verb_once_and_unknown_verbs_fail_in_one_line(tmp_path):
    shown = run([*DOTS, "--help"], tmp_path)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    for verb in VERBS:
        assert sum(line.split()[:1] == [verb] for line in lines) == 1, verb
    unknown = run([*DOTS, "serach", "backbone=lab"], tmp_path)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "unknown verb 'serach'" in unknown.stderr
    bare = run(DOTS, tmp_path)
    assert bare.returncode == 2 and "verbs:" in bare.stderr


def test_every_runnable_dots_module_is_a_verb_and_the_only_script_is_dots():
    runnable = {p.parent.name for p in (REPO / "dots").glob("*/__main__.py")}
    assert runnable <= set(VERBS), runnable - set(VERBS)
    for verb in VERBS:
        assert importlib.util.find_spec(f"dots.{verb}") is not None, verb
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"dots": "dots.options.cli:main"}
