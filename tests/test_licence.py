"""The licence: the package's own (LICENSE, Apache-2.0 in pyproject.toml) and a merged model's,
which repeats the base model's card (`license: llama3.1` in its README front matter), read
from a local directory and from a Hub snapshot, else says the licence is not stated."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from dots.export.card import base_licence
from dots.merge.executor import merge_checkpoints
from dots.testing import put_in_hub_cache

REPO = Path(__file__).resolve().parent.parent
LLAMA_CARD = "---\nlicense: llama3.1\nlanguage:\n- en\n---\n\n# A base model\n"


@pytest.fixture(scope="module")
def carded(checkpoints, tmp_path_factory) -> dict[str, Path]:
    """A base whose card says `license: llama3.1` (a copy: the card is written into it), the
    same weights without a card, two sources."""
    family = checkpoints({"dtype": torch.bfloat16}, sft={"seed": 1}, rlvr={"seed": 2})
    base = Path(shutil.copytree(family.base, tmp_path_factory.mktemp("licence") / "base"))
    (base / "README.md").write_text(LLAMA_CARD)
    return {"base": base, "bare": family.base, **family.sources}


def merge_cli(base: str, carded: dict[str, Path], out: Path, env: dict[str, str] | None = None) -> ModelCard:
    """`python -m dots.merge` as a user runs it; the merged model's card."""
    cmd = [sys.executable, "-m", "dots.merge", "method=ties", "backbone=custom", f"backbone.base={base}"]
    cmd += [f"+backbone.sources.sft={carded['sft']}", f"+backbone.sources.rlvr={carded['rlvr']}", f"output={out}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ModelCard.load(out / "README.md")


def test_the_package_is_apache_2_licensed():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it


def test_a_merge_of_a_llama_licensed_base_carries_its_licence(carded, tmp_path):
    card = merge_cli(str(carded["base"]), carded, tmp_path / "merged")
    assert card.data.license == "llama3.1"
    assert "| licence | `llama3.1` (the base model's) |" in card.text


def test_the_licence_comes_from_a_hub_snapshot_of_the_base(carded, tmp_path):
    cache = tmp_path / "hub"
    put_in_hub_cache(carded["base"], "meta-llama/Tiny-Base", cache)
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    card = merge_cli("meta-llama/Tiny-Base", carded, tmp_path / "merged", env)
    assert card.data.license == "llama3.1"
    assert card.data.base_model == ["meta-llama/Tiny-Base"]


def test_without_a_base_card_the_licence_is_not_stated(carded, tmp_path):
    out = merge_checkpoints(carded["bare"], {"sft": carded["sft"]}, tmp_path / "merged", method="linear")
    card = ModelCard.load(out / "README.md")
    assert card.data.license is None
    assert "| licence | not stated" in card.text


@pytest.mark.parametrize(
    ("front", "want"),
    [
        ("license: apache-2.0\n", {"license": "apache-2.0"}),
        (
            "license: other\nlicense_name: qwen\nlicense_link: https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/LICENSE\n",
            {
                "license": "other",
                "license_name": "qwen",
                "license_link": "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/LICENSE",
            },
        ),
        ("language: en\n", {}),
        ("license: [unclosed\n", {}),
    ],
)
def test_base_licence_reads_the_front_matter(tmp_path, front, want):
    (tmp_path / "README.md").write_text(f"---\n{front}---\n\n# card\n")
    assert base_licence(tmp_path) == want
