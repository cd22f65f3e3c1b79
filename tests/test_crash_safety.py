"""The commit protocol's cases as a user meets them (#48; docs/outputs.md "What a crash leaves"): a long
output name, what a dead writer left, a live writer's temporary, a rerun after the last step, the switch
without an atomic exchange and its journal, a scrambled Fisher table, a bad input found mid-search.
tests/test_crash_points.py enumerates the crash points themselves."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import overrides, run_cli

import dots.io.commit as commit
from dots.errors import DotsError
from dots.io.records import RECORD, read_record
from dots.io.safetensors import check_data_digest, data_digest, write_file
from dots.merge.executor import merge_checkpoints


def merged(tiny, out: Path, **kw) -> Path:
    _root, base, srcs, _pool = tiny
    return merge_checkpoints(base, {k: srcs[k] for k in ("sft", "rlvr")}, out, method="linear", **kw)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if commit._TEMP.search(p.name))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_destination_name_of_247_bytes_is_written(tiny, tmp_path):
    name = "é" * 100 + "m" * 47  # 247 bytes in UTF-8: legal; its temporary sibling must fit in 255
    out = merged(tiny, tmp_path / name)
    assert out.name == name and read_record(out)["kind"] == "merge"
    assert all(len(n.encode()) <= 255 for n in (commit.temp_sibling(out, r).name for r in commit.ROLES))
    assert temporaries(tmp_path) == []


def test_a_dead_writers_leftover_is_removed_and_said_a_live_ones_kept(tiny, tmp_path, caplog):
    out = tmp_path / "out"
    dead = out.parent / f".out.tmp-{dead_pid()}@{commit._HOST}-abcdef"
    (dead / "sub").mkdir(parents=True)
    (dead / "model.safetensors").write_bytes(b"x" * 1000)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    alive = out.parent / f".out.tmp-{live.pid}@{commit._HOST}-fedcba"
    alive.mkdir()
    try:
        with caplog.at_level(logging.WARNING, logger="dots.io"):
            merged(tiny, out)
        assert not dead.exists() and alive.is_dir()  # the live writer's temporary is left alone
        said = [r.getMessage() for r in caplog.records if dead.name in r.getMessage()]
        assert len(said) == 1 and "died" in said[0]
    finally:
        live.kill()
        live.wait()


def test_the_same_merge_rerun_replaces_its_own_output_without_a_flag(tiny, tmp_path):
    """A crash after the switch leaves the new output whole: the same command must then finish."""
    out = merged(tiny, tmp_path / "out")
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.name != RECORD}
    again = merged(tiny, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in again.iterdir() if p.name != RECORD} == first
    _root, base, srcs, _pool = tiny
    with pytest.raises(DotsError, match="overwrite=true"):  # another merge still needs the flag
        merge_checkpoints(base, {k: srcs[k] for k in ("sft", "rlvr")}, out, method="ties")


def test_the_switch_without_an_exchange_and_its_journal(tiny, tmp_path, monkeypatch):
    out = merged(tiny, tmp_path / "out", max_shard_bytes=40_000)
    monkeypatch.setattr(commit, "_exchange", lambda a, b: False)  # NFS: no RENAME_EXCHANGE
    again = merged(tiny, tmp_path / "out", overwrite=True)
    assert read_record(again)["files"] and temporaries(tmp_path) == []
    # a crash between the two renames: the path missing, the journal, the new version and the old aside,
    # named as a writer that died (its pid) names them
    pid = dead_pid()
    named = [commit.temp_sibling(out, role).name.replace(f"-{os.getpid()}@", f"-{pid}@") for role in commit.ROLES]
    new, aside, journal = (out.with_name(name) for name in named)
    os.rename(out, aside)
    new.mkdir()
    (new / "weights").write_text("new")
    journal.write_text(json.dumps({"new": new.name, "old": aside.name}))
    commit.recover(out)
    assert (out / "weights").read_text() == "new"
    assert [p for p in temporaries(tmp_path) if ".switch-" in p] == []


def test_a_scrambled_fisher_table_is_found_by_its_digest(tmp_path):
    tensors = {"a": torch.arange(64, dtype=torch.float32), "b": torch.ones(3, 5)}
    path = tmp_path / "fisher.safetensors"
    write_file(tensors, path, {"sha256": data_digest(tensors)})
    check_data_digest(path)
    raw = bytearray(path.read_bytes())
    raw[-20] ^= 0xFF  # same size, one byte changed in the data
    path.write_bytes(bytes(raw))
    with pytest.raises(DotsError, match="do not match their digest"):
        check_data_digest(path)


def test_a_base_refused_mid_search_leaves_no_claim_and_the_repaired_rerun_runs(tiny, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    root, base, srcs, pool = tiny
    broken = Path(shutil.copytree(base, tmp_path / "base"))
    weights = broken / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(n for n in tensors if n.endswith("mlp.up_proj.weight"))
    tensors[name] = tensors[name].clone()
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    args = [a if not a.startswith("backbone.base=") else f"backbone.base={broken}" for a in overrides(tiny, run_dir)]
    args = [a for a in args if not a.startswith("cache_dir=")] + [f"cache_dir={cache}", "export.enabled=false"]
    proc = run_cli("dots.search", *args)
    assert proc.returncode == 2 and "NaN/Inf" in proc.stderr, proc.stderr[-2000:]
    assert not run_dir.exists() and not (cache / "taskvec").exists()
    shutil.copyfile(Path(base) / "model.safetensors", weights)  # repaired
    proc = run_cli("dots.search", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run_dir / "result.yaml").is_file()
