"""Damaged run state: a truncated study.db, a τ̃ cache entry with a missing shard, a
selection.jsonl cut mid-line. Each either stops with one line saying what is damaged and
how to recover, or — where rebuilding is safe — is rebuilt, said once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from helpers import REPO, overrides, run


def cli(ovr):
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "dots.search", *ovr], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def complete(db):
    return sqlite3.connect(db).execute("select count(*) from trials where state='COMPLETE'").fetchone()[0]


def test_truncated_study_db_is_one_line_with_the_way_out(tiny, tmp_path):
    ovr = overrides(tiny, tmp_path / "run", extra=["export.enabled=false"])
    run(ovr)
    db = tmp_path / "run" / "study.db"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    proc = cli(ovr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"the study file {db} is damaged" in lines[0] and "move it away" in lines[0]


def test_cache_entry_missing_its_shard_is_rebuilt_and_said_once(tiny, tmp_path):

    cache = tmp_path / "cache"
    ovr = overrides(tiny, tmp_path / "run", extra=["export.enabled=false", f"cache_dir={cache}"])
    run(ovr)
    shard = sorted((cache / "taskvec").glob("*/tau.safetensors"))[0]  # cache_dir is the root (docs/outputs.md)
    before = shard.read_bytes()
    shard.unlink()
    proc = cli(ovr[:-1] + [f"cache_dir={cache}", "search.n_trials=4"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "is damaged" in line]
    assert len(said) == 1 and str(shard.parent) in said[0] and "rebuilding it" in said[0], proc.stdout
    assert shard.read_bytes() == before  # the same τ̃ again
    assert complete(tmp_path / "run" / "study.db") == 4
    assert not [p for p in shard.parent.parent.iterdir() if ".damaged-" in p.name]


def test_cache_entry_with_scrambled_bytes_is_rebuilt_and_said_once(tiny, tmp_path):
    """Same size, other bytes (a bad disk block): found by the entry's digest, not deep in the swap."""
    cache = tmp_path / "cache"
    ovr = overrides(tiny, tmp_path / "run", extra=["export.enabled=false", f"cache_dir={cache}"])
    run(ovr)
    shard = sorted((cache / "taskvec").glob("*/tau.safetensors"))[0]
    before = shard.read_bytes()
    middle = len(before) // 2 + 4
    shard.write_bytes(before[:middle] + bytes(b ^ 0x5A for b in before[middle : middle + 64]) + before[middle + 64 :])
    proc = cli(ovr[:-1] + [f"cache_dir={cache}", "search.n_trials=4"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "is damaged" in line]
    assert len(said) == 1 and "do not match their digest" in said[0] and "rebuilding it" in said[0], proc.stdout
    assert shard.read_bytes() == before
    assert complete(tmp_path / "run" / "study.db") == 4


def test_selection_cut_mid_line_is_selected_again_the_same(tiny, tmp_path):
    ovr = overrides(tiny, tmp_path / "run", extra=["export.enabled=false"])
    run(ovr)
    path = tmp_path / "run" / "selection.jsonl"
    before = path.read_text()
    lines = before.splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    proc = cli(overrides(tiny, tmp_path / "run", trials=4, extra=["export.enabled=false"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if "is damaged" in line]
    assert len(said) == 1 and f"{path} is damaged at line 3; selecting again" in said[0], proc.stdout
    assert path.read_text() == before
    assert complete(tmp_path / "run" / "study.db") == 4


def test_a_reselection_that_differs_from_the_scored_one_stops(tiny, tmp_path):
    """selection.jsonl cut mid-line whose intact rows name a query that selecting again does not
    choose (the study was scored on other queries): one line, exit 2; the damaged file is kept
    as it was for restoring, and the study is not extended on other queries by a rerun."""
    ovr = overrides(tiny, tmp_path / "run", extra=["export.enabled=false"])
    run(ovr)
    path = tmp_path / "run" / "selection.jsonl"
    header, first, second, *rest = path.read_text().splitlines(keepends=True)
    chosen = {json.loads(line)["id"] for line in (first, second, *rest)}
    other = next(f"pool.jsonl-{i}" for i in range(10) if f"pool.jsonl-{i}" not in chosen)
    row = {**json.loads(first), "id": other}  # the study "was scored" on a query the draw does not make
    damaged = header + json.dumps(row) + "\n" + second[: len(second) // 2]
    path.write_text(damaged)
    more = overrides(tiny, tmp_path / "run", trials=4, extra=["export.enabled=false"])
    for _ in range(2):  # and again: the first stop must not have replaced the evidence
        proc = cli(more)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]  # (and HF's loading bar)
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"{path} is damaged at line 3, and selecting again chose other queries" in lines[0]
        assert "study.db" in lines[0]
        assert path.read_text() == damaged
    assert complete(tmp_path / "run" / "study.db") == 3
