"""Files dots writes get the process's umask (0o666 & ~umask), like files made by open():
safetensors' save_file (under save_pretrained) makes 0600 files and shutil.copy2 keeps a
source's mode, so a merge, an export, a lab model and a τ̃ cache entry checked here would
otherwise differ from their neighbours."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

UMASK = 0o027  # not the usual 022: the modes must follow the umask, not a constant


@pytest.fixture
def umask():
    old = os.umask(UMASK)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in sorted(root.rglob("*"))}


def assert_umask_modes(root: Path) -> None:
    found = modes(root)
    assert any(name.endswith(".safetensors") for name in found), found
    for name, mode in found.items():
        want = 0o777 & ~UMASK if (root / name).is_dir() else 0o666 & ~UMASK
        assert mode == want, f"{name}: {oct(mode)} != {oct(want)}"


@pytest.fixture
def private_base(qwen_bf16, tmp_path):
    """The family's base with every file 0600 (as save_pretrained leaves the weights)."""
    out = tmp_path / "private_base"
    shutil.copytree(qwen_bf16.base, out)
    for p in out.iterdir():
        p.chmod(0o600)
    return out


def test_merge_output_takes_the_umask(qwen_bf16, private_base, tmp_path, umask):
    from dots.merge.executor import merge_checkpoints

    out = merge_checkpoints(private_base, qwen_bf16.sources, tmp_path / "merged", method="ties")
    assert_umask_modes(out)


def test_cache_entry_and_export_take_the_umask(qwen_bf16, private_base, tmp_path, umask):
    from dots.export.model import write_synthesized
    from dots.io.align import align
    from dots.io.checkpoint import Checkpoint
    from dots.vectors.cache import build_task_vectors

    base = Checkpoint(private_base)
    sources = {k: Checkpoint(v) for k, v in qwen_bf16.sources.items()}
    al = align(base, sources)
    tv = build_task_vectors(base, sources, cache_root=tmp_path / "cache", alignment=al)
    for entry in tv.entries.values():
        assert_umask_modes(entry.path)
    out = write_synthesized(tmp_path / "export", tv, al, {"sft": 0.5, "rlvr": 1.0}, base.config, "card")
    assert_umask_modes(out)


def test_lab_model_takes_the_umask(tmp_path, umask):
    from dots.lab.config import load_config
    from dots.lab.model import new_model, save_model
    from dots.lab.tokenizer import build_char_tokenizer

    cfg = load_config()
    model = new_model(cfg.model, build_char_tokenizer(), seed=0)
    out = save_model(model, tmp_path / "lab" / "base", "bfloat16", {"stage": "base"})
    assert_umask_modes(out)
