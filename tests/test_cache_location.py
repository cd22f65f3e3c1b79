"""The caches (τ̃, Fisher) live in the user's cache directory — `$DOTS_CACHE`, else
`$XDG_CACHE_HOME/dots`, else `~/.cache/dots` — so two projects on the same checkpoints share
them: two processes started at once from two directories build each entry once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dots.paths import cache_root

REPO = Path(__file__).resolve().parent.parent

# one project's process: wait for the start signal, then the τ̃ of `sft` and its Fisher table
# from the default cache; prints which entries it used and whether it found them built
WORKER = r"""
import json, logging, sys, time
from pathlib import Path

records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("dots").addHandler(handler)
logging.getLogger("dots").setLevel(logging.INFO)

from dots.io.checkpoint import Checkpoint
from dots.merge.calibration import CalibrationExample
from dots.merge.fisher import fisher_for
from dots.vectors.cache import build_task_vectors

base, sft, go = Checkpoint(sys.argv[1]), Checkpoint(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
tv = build_task_vectors(base, {"sft": sft})
examples = [CalibrationExample("What is 2 + 3?", "5"), CalibrationExample("What is 7 - 4?")]
fisher = fisher_for(sft, examples, max_new_tokens=4)
print(json.dumps({
    "taskvec": str(tv.entries["sft"].path),
    "fisher": str(fisher),
    "taskvec_reused": any("reusing cached task vector" in m for m in records),
    "fisher_reused": any("reusing cached Fisher" in m for m in records),
}))
"""


def test_the_default_is_the_users_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("DOTS_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("DOTS_CACHE")
    assert cache_root() == tmp_path / "xdg" / "dots"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "dots"
    monkeypatch.setenv("DOTS_OUTPUTS", str(tmp_path / "outputs"))  # the outputs root does not move it
    assert cache_root() == tmp_path / "home" / ".cache" / "dots"


def test_the_suite_does_not_use_the_real_user_cache():
    assert Path(os.environ["DOTS_CACHE"]).resolve() != (Path.home() / ".cache" / "dots").resolve()


def test_two_projects_at_once_build_each_entry_once(qwen_bf16, tmp_path):
    xdg = tmp_path / "xdg"
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "DOTS_CACHE"}
    env.update(XDG_CACHE_HOME=str(xdg), PYTHONPATH=str(REPO))
    procs = []
    for project in ("project-a", "project-b"):
        cwd = tmp_path / project
        cwd.mkdir()
        args = [sys.executable, "-c", WORKER, str(qwen_bf16.base), str(qwen_bf16.sources["sft"]), str(go)]
        procs.append(
            subprocess.Popen(
                args,
                cwd=cwd,
                env={**env, "DOTS_OUTPUTS": str(cwd / "outputs")},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(0.5)  # both importing: released together
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    a, b = results
    assert a["taskvec"] == b["taskvec"] and a["fisher"] == b["fisher"]  # one shared entry each
    assert Path(a["taskvec"]).parent == xdg / "dots" / "taskvec"
    assert Path(a["fisher"]).parent == xdg / "dots" / "fisher"
    assert sorted([a["taskvec_reused"], b["taskvec_reused"]]) == [False, True]  # built by exactly one
    assert sorted([a["fisher_reused"], b["fisher_reused"]]) == [False, True]
    assert len(list((xdg / "dots" / "fisher").glob("*.safetensors"))) == 1
    for project in ("project-a", "project-b"):  # nothing in either project's directory
        assert not (tmp_path / project / "outputs").exists()
