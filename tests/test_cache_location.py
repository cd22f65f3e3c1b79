"""The caches (τ̃, Fisher) live in the user's cache directory — `$DOTS_CACHE`, else
`$XDG_CACHE_HOME/dots`, else `~/.cache/dots` — so two projects on the same checkpoints share
them: two processes started at once from two directories build each entry once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dots.paths import cache_root

REPO = Path(__file__).resolve().parent.parent

# one project's process: the τ̃ of `sft` and its Fisher table from the default cache; prints which
# entries it used and whether it found them built. Its run-once locks are wrapped into a barrier:
# a process arriving at a lock leaves a mark, and the process that takes a lock first holds it until
# the other has arrived at the same lock — so the two builds really overlap (the second asks while
# the first is building), which two runs one after the other never do.
WORKER = r"""
import contextlib, json, logging, os, sys, time
from pathlib import Path

import dots.runtime.locks as locks

records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("dots").addHandler(handler)
logging.getLogger("dots").setLevel(logging.INFO)

base_dir, sft_dir, sync, me, other = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5]
real_lock, held_first = locks.run_once_lock, []

@contextlib.contextmanager
def barrier_lock(path):
    (sync / f"{path.name}.arrived.{me}").touch()
    with real_lock(path):
        first = not any(sync.glob(f"{path.name}.held.*"))
        (sync / f"{path.name}.held.{me}").touch()
        if first:  # hold the lock until the other process is waiting for it
            deadline = time.monotonic() + 300
            while not (sync / f"{path.name}.arrived.{other}").exists():
                if time.monotonic() > deadline:
                    sys.exit(f"the other process never reached {path.name}")
                time.sleep(0.01)
            held_first.append(path.name)
        yield

locks.run_once_lock = barrier_lock  # before the cache and Fisher modules import it

from dots.io.checkpoint import Checkpoint
from dots.merge.calibration import CalibrationExample
from dots.merge.fisher import fisher_for
from dots.vectors.cache import build_task_vectors

base, sft = Checkpoint(base_dir), Checkpoint(sft_dir)
tv = build_task_vectors(base, {"sft": sft})
examples = [CalibrationExample("What is 2 + 3?", "5"), CalibrationExample("What is 7 - 4?")]
fisher = fisher_for(sft, examples, max_new_tokens=4)
print(json.dumps({
    "taskvec": str(tv.entries["sft"].path),
    "fisher": str(fisher),
    "taskvec_reused": any("reusing cached task vector" in m for m in records),
    "fisher_reused": any("reusing cached Fisher" in m for m in records),
    "held_first": held_first,
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


def test_the_suite_does_not_use_the_real_user_cache(tmp_path):
    """Where a default cache of a process the suite starts lands (the CLI processes inherit the
    environment the conftest set): not the user's ~/.cache/dots, nor $XDG_CACHE_HOME's."""
    probe = "from dots.paths import cache_root; print(cache_root())"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    where = Path(
        subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    real = [Path.home() / ".cache" / "dots"]
    if os.environ.get("XDG_CACHE_HOME"):
        real.append(Path(os.environ["XDG_CACHE_HOME"]) / "dots")
    assert all(where.resolve() != r.resolve() for r in real), where
    assert not any(where.resolve().is_relative_to(r.resolve()) for r in real)


def test_two_projects_at_once_build_each_entry_once(qwen_bf16, tmp_path):
    xdg = tmp_path / "xdg"
    env = {k: v for k, v in os.environ.items() if k != "DOTS_CACHE"}
    env.update(XDG_CACHE_HOME=str(xdg), PYTHONPATH=str(REPO))
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = []
    for project, other in (("project-a", "project-b"), ("project-b", "project-a")):
        cwd = tmp_path / project
        cwd.mkdir()
        args = [
            sys.executable,
            "-c",
            WORKER,
            str(qwen_bf16.base),
            str(qwen_bf16.sources["sft"]),
            str(sync),
            project,
            other,
        ]
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
    # the builds overlapped: each lock was held first by one process while the other waited on it,
    # and the process that held it first is the one that built the entry
    assert len(a["held_first"]) + len(b["held_first"]) == 2
    for r in (a, b):
        assert (f".{Path(r['taskvec']).name}.lock" in r["held_first"]) == (not r["taskvec_reused"])
        assert (f".{Path(r['fisher']).stem}.lock" in r["held_first"]) == (not r["fisher_reused"])
    assert len(list((xdg / "dots" / "fisher").glob("*.safetensors"))) == 1
    for project in ("project-a", "project-b"):  # nothing in either project's directory
        assert not (tmp_path / project / "outputs").exists()
