"""The user's command, `python -m dots.search backbone=qwen7b`, from a Hugging Face cache
laid out as huggingface_hub writes it, offline (nothing is downloaded), to its end; the
Hub-facing backbones' configurations; the exported card's Hub metadata."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from helpers import run_cli

from dots.options.compose import compose
from dots.testing import put_in_hub_cache

HUB_BACKBONES = ["qwen7b", "qwen7b_exgrpo_relift", "qwen1.5b", "llama8b"]
# the search's limits lowered on the command line (the rest is backbone=qwen7b as shipped)
SMALL = [
    "engine=hf",
    "search.n_trials=3",
    "search.n_startup_trials=2",
    "pool.limit=8",
    "selection.n=4",
    "selection.m=2",
    "selection.threshold=1.0",  # a random tiny model answers nothing consistently
    "search.k=2",
    "backbone.max_tokens=8",
]


def hub_ids(backbone: str) -> dict[str, str]:
    bb = compose("search", [f"backbone={backbone}"]).backbone
    return {"base": str(bb.base), **{str(k): str(v) for k, v in bb.sources.items()}}


def offline_env(tmp: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache), HF_HOME=str(tmp / "hf-home"))
    env["DOTS_OUTPUTS"] = str(tmp / "outputs")
    env.pop("DOTS_CACHE", None)  # the default cache location, under this test's XDG_CACHE_HOME
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    return env


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def hub_cache(checkpoints, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A tiny bf16 trio in a Hub cache under the real ids of backbone=qwen7b; returns the
    cache and each repo's commit (its refs/main)."""
    tmp = tmp_path_factory.mktemp("hub")
    family = checkpoints(
        {"dtype": torch.bfloat16}, sft={"seed": 1, "scale": 0.02}, rlvr={"seed": 2, "scale": 0.02, "density": 0.1}
    )
    dirs = {"base": family.base, **family.sources}
    ids = hub_ids("qwen7b")
    assert set(ids) == set(dirs)
    commits = {role: put_in_hub_cache(dirs[role], ids[role], tmp / "cache").name for role in ids}
    return tmp / "cache", commits


def test_qwen7b_search_runs_offline_from_the_hub_cache(hub_cache, tmp_path):
    """Every stage of the user's command on Hub ids: τ̃, selection on the packaged math pool,
    study, pick, export with a Hub card; the push fails offline, keeps the export and says
    how to retry."""
    cache, commits = hub_cache
    env = offline_env(tmp_path, cache)
    done = run_cli("dots.search", "backbone=qwen7b", *SMALL, "export.push_to_hub=me/dots-qwen7b", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = next((tmp_path / "outputs" / "search").glob("qwen7b-*"))
    stages = {p.stem for p in (run_dir / ".stages").glob("*.json")}
    assert {"task_vectors", "selection", "study", "pick", "export"} <= stages
    selected = [json.loads(line) for line in (run_dir / "selection.jsonl").read_text().splitlines()[1:]]
    assert len(selected) == 4 and all(
        q["id"].split("-")[0] in {"aime", "aime25", "amc", "math", "minerva", "olympiad_bench"} for q in selected
    )
    assert "retry with: python -m dots.export push" in done.stderr
    model = run_dir / "model"
    assert (model / "model.safetensors").exists() and (model / "pareto.png").exists()

    from huggingface_hub import ModelCard

    card = ModelCard.load(model / "README.md")
    ids = hub_ids("qwen7b")
    assert card.data.base_model == [ids["base"], ids["sft"], ids["rlvr"]]
    assert card.data.base_model_relation == "merge"
    assert sorted(card.data.tags) == ["dots", "merge"]  # the method is dots: once
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    for role, commit in commits.items():  # each checkpoint's revision is the snapshot read
        line = next(row for row in card.text.splitlines() if row.startswith(f"| {role} |"))
        assert commit in line
        if role != "base":
            assert f"{result['coefficients'][role]:.6g}" in line
    assert "![Pareto front](pareto.png)" in card.text
    for q in selected:
        assert q["id"] in card.text
    assert '"consistency"' in card.text and '"perplexity"' in card.text


def test_an_empty_cache_stops_in_one_line_naming_the_repo(tmp_path):
    env = offline_env(tmp_path, tmp_path / "empty-cache")
    before = tree(tmp_path)
    done = run_cli("dots.search", "backbone=qwen7b", *SMALL, env=env, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert hub_ids("qwen7b")["base"] in lines[0] and "HF_HUB_OFFLINE" in lines[0]
    assert tree(tmp_path) == before


@pytest.mark.parametrize("backbone", HUB_BACKBONES)
def test_hub_backbones_resolve_and_explain_every_missing_id(backbone, tmp_path):
    """`--cfg job --resolve` resolves; every source the paper gives no id for is explained, and
    running without it says exactly which values to pass (before touching the Hub)."""
    env = offline_env(tmp_path, tmp_path / "empty-cache")
    shown = run_cli("dots.search", f"backbone={backbone}", "--cfg", "job", "--resolve", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    cfg = yaml.safe_load(shown.stdout)
    assert cfg["backbone"]["base"].count("/") == 1 and cfg["pool"]["path"].endswith(".parquet")
    missing = [k for k, v in cfg["backbone"]["sources"].items() if v == "???"]
    if not missing:
        return
    assert cfg["backbone"].get("sources_note")
    before = tree(tmp_path)
    done = run_cli("dots.search", f"backbone={backbone}", env=env, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert cfg["backbone"]["sources_note"] in line
    for key in missing:
        assert f"backbone.sources.{key}=" in line
    assert tree(tmp_path) == before
