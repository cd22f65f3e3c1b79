"""A full disk while building the τ̃ cache or writing a model (export, merge): one line, no
partial model, no cache entry a rerun would take as finished, no temporary files left.
Small tmpfs mounts stand in for the full disk (skipped where mounting is not permitted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, overrides, run, unavailable

from dots.errors import DotsError


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(kib) → the path of a fresh tmpfs of that size (unmounted afterwards)."""
    mounted: list[Path] = []

    def make(kib: int) -> Path:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], capture_output=True)
        if proc.returncode != 0:
            unavailable(f"cannot mount a tmpfs here (needs root; CI runs as root): {proc.stderr.decode().strip()}")
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


def cli(*args):
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, lines


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if ".tmp" in p.name)


def _entry_kib(tiny, tmp_path) -> list[int]:
    """KiB a tmpfs needs for each source's τ̃ entry (sft, then rlvr: the build order), from the
    entries built on an ordinary disk with the search's own sparsify options."""
    from helpers import compose

    from dots.io.checkpoint import Checkpoint
    from dots.plain import to_plain
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    root, base, srcs, _ = tiny
    cfg = SparsifyConfig(**to_plain(compose(overrides(tiny, tmp_path / "unused")).sparsify))
    tv = build_task_vectors(
        Checkpoint(base), {k: Checkpoint(srcs[k]) for k in ("sft", "rlvr")}, cfg, cache_root=tmp_path / "measure"
    )
    pages = [sum(-(-f.stat().st_size // 4096) for f in tv.entries[k].path.iterdir()) for k in ("sft", "rlvr")]
    return [4 * n for n in pages]


def test_cache_on_a_full_disk_leaves_no_entry(tiny, tmp_path, small_disk):
    first, second = _entry_kib(tiny, tmp_path)
    # nothing fits; the first source fits, the second not
    for kib, finished in ((first // 2, 0), (first + second // 2, 1)):
        cache = small_disk(kib)
        rc, lines = cli("dots.search", *overrides(tiny, tmp_path / f"run{kib}", extra=[f"cache_dir={cache}"]))
        assert rc == 2 and len(lines) == 1 and "not enough space" in lines[0], lines
        taskvec = cache / "taskvec"  # cache_dir is the root; withdrawn when the refused run left nothing in it
        entries = [p for p in taskvec.iterdir() if p.is_dir()] if taskvec.exists() else []
        assert len(entries) == finished and not leftovers(cache)
        for entry in entries:  # what is there is whole
            from dots.io.checkpoint import Checkpoint

            assert (entry / "taskvec.json").exists() and Checkpoint(entry).names


def test_export_and_merge_onto_a_full_disk_leave_no_partial_model(tiny, tmp_path, small_disk):
    root, base, srcs, _ = tiny
    run(overrides(tiny, tmp_path / "run", extra=["export.enabled=false"]))
    disk = small_disk(128)  # the bf16 model needs ~0.17 MiB
    rc, lines = cli("dots.search", *overrides(tiny, tmp_path / "run", extra=[f"export.dir={disk / 'model'}"]))
    assert rc == 2 and len(lines) == 1 and "not enough space" in lines[0], lines
    assert list(disk.iterdir()) == []
    rc, lines = cli(
        "dots.merge",
        "backbone=custom",
        f"backbone.base={base}",
        f"+backbone.sources.sft={srcs['sft']}",
        f"+backbone.sources.rlvr={srcs['rlvr']}",
        "method=task_arithmetic",
        f"output={disk / 'merged'}",
    )
    assert rc == 2 and len(lines) == 1 and "not enough space" in lines[0], lines
    assert list(disk.iterdir()) == []


def test_disk_filling_up_mid_write_is_one_line_and_nothing_kept(tmp_path, small_disk, monkeypatch):
    """Space that runs out after the check (another writer took it): ENOSPC from the background
    writer becomes one DotsError, and the temporary directory goes."""
    from dots.io import writer as writer_module
    from dots.io.safetensors import TensorInfo

    disk = small_disk(128)
    monkeypatch.setattr(writer_module, "check_free_space", lambda out_dir, nbytes: None)
    plan = {f"t{i}": TensorInfo((256, 256), torch.float32) for i in range(2)}  # 512 KiB
    with pytest.raises(DotsError, match=r"cannot write .*out: No space left on device \(no space left"):
        with writer_module.CheckpointWriter(disk / "out", plan) as writer:
            for name in plan:
                writer.write(name, torch.ones(256, 256))
            writer.commit()
    assert list(disk.iterdir()) == []


def test_cache_filling_up_mid_build_is_one_line_and_nothing_kept(tiny, tmp_path, small_disk, monkeypatch):
    """Space that runs out while a τ̃ entry is written (after the check passed): one DotsError,
    and neither the entry nor its temporary directory stays."""
    from dots.io.checkpoint import Checkpoint
    from dots.vectors import cache as cache_module
    from dots.vectors import entry as entry_module

    root, base, srcs, _ = tiny
    first, _second = _entry_kib(tiny, tmp_path)
    disk = small_disk(first // 2)
    monkeypatch.setattr(entry_module, "check_free_space", lambda out_dir, nbytes: None)  # (the entry's writer)
    with pytest.raises(DotsError, match=r"cannot write .*: No space left on device \(no space left"):
        cache_module.build_task_vectors(Checkpoint(base), {"sft": Checkpoint(srcs["sft"])}, cache_root=disk)
    # no entry and no temporary directory; the cache's own record (`dots.io.destination`) stays
    assert [p.name for p in disk.iterdir() if not p.name.endswith(".lock")] == [".dots-output.json"]
