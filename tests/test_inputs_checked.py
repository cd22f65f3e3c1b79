"""Inputs checked before the work and against each other (issue #39), through the real commands.

Each refusal runs `python -m dots.<verb>` as tests/test_bad_inputs.py does (its command lines and
snapshot are reused): exit code 2, one `error:` line naming the file or option, no traceback, and
nothing created, changed or removed in the inputs or the working tree. The odd-but-valid inputs
(a source equal to the base, two identical sources) merge with exit 0 and one `warning:` line.
The records' digests, a run directory's identity and one meaning of `cache_dir` are checked
in-process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from helpers import compose, overrides
from test_bad_inputs import assert_refused, evaluate, isolated_env, merge, search

from dots.errors import DotsError
from dots.io.destination import RECORD, claim, read_record
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter


def _edit_config(model: Path, **fields: object) -> Path:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **fields}))
    return model


@pytest.fixture(scope="module")
def inputs(checkpoints, tmp_path_factory) -> dict[str, Path]:
    """Checkpoints whose files contradict each other, a symbolic link loop, a .bin checkpoint (the
    shared models copied in: the snapshot covers them, and some are edited)."""
    root = tmp_path_factory.mktemp("inputs_checked")
    family = checkpoints(
        {"dtype": torch.bfloat16}, sft={"seed": 1, "scale": 0.02}, rlvr={"seed": 2, "scale": 0.01, "density": 0.3}
    )
    base = shutil.copytree(family.base, root / "base")
    m = {"root": root, "base": base, "sft": shutil.copytree(family.sources["sft"], root / "sft")}
    m["rlvr"] = shutil.copytree(family.sources["rlvr"], root / "rlvr")
    m["base_copy"] = shutil.copytree(base, root / "base_copy")
    m["sft_copy"] = shutil.copytree(m["sft"], root / "sft_copy")
    llama = checkpoints({"arch": "llama", "dtype": torch.bfloat16}).base
    m["llama_config"] = shutil.copytree(m["sft"], root / "llama_config")  # Qwen2 weights (biases)
    shutil.copy(llama / "config.json", m["llama_config"] / "config.json")
    m["hidden"] = _edit_config(shutil.copytree(m["sft"], root / "hidden"), hidden_size=128)
    m["layers"] = _edit_config(shutil.copytree(m["sft"], root / "layers"), num_hidden_layers=3)
    m["bad_tokenizer"] = shutil.copytree(m["sft"], root / "bad_tokenizer")
    tokenizer = m["bad_tokenizer"] / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text()[:120])
    m["base_bad_tokenizer"] = shutil.copytree(base, root / "base_bad_tokenizer")
    shutil.copy(tokenizer, m["base_bad_tokenizer"] / "tokenizer.json")
    m["truncated_config"] = root / "truncated_config.json"
    m["truncated_config"].write_text((base / "config.json").read_text()[:90])
    (root / "pool.jsonl").write_text(
        "".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(6))
    )
    m["pool"] = root / "pool.jsonl"
    m["pool_dir"] = root / "pool_dir"
    m["pool_dir"].mkdir()
    m["loop"] = root / "loop"
    os.symlink(root / "loop_back", m["loop"])
    os.symlink(m["loop"], root / "loop_back")
    m["a_file"] = root / "a_file"
    m["a_file"].write_text("not a directory")
    m["bin"] = root / "bin"
    m["bin"].mkdir()
    torch.save({"w": torch.zeros(2)}, m["bin"] / "pytorch_model.bin")
    return m


def fake_lab_build_without_weights(w: Path) -> Path:
    """The default lab base build under `w`/outputs with its weights removed (as a user might)."""
    from dots.lab.config import load_config, stage_key

    out = w / "outputs" / "lab" / f"base-{stage_key(load_config([]), 'base')}"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / RECORD).write_text(json.dumps({"kind": "lab", "files": ["config.json", "model.safetensors"]}))
    return out / "model.safetensors"


def another_search_in(run: Path) -> Path:
    """`run` as the run directory of another search (another identity)."""
    run.mkdir()
    (run / RECORD).write_text(json.dumps({"kind": "search-run", "identity": "0123456789abcdef"}))
    return run


def edited_export_in(run: Path) -> Path:
    """`run`/model as this run's export whose README.md a user edited since dots wrote it."""
    (run / "model").mkdir(parents=True)
    (run / RECORD).write_text(json.dumps({"kind": "search-run"}))
    (run / "model" / "README.md").write_text("my notes on this model\n")
    record = {"kind": "export", "run_dir": str(run.resolve()), "files": ["README.md"]}
    (run / "model" / RECORD).write_text(json.dumps({**record, "digests": {"README.md": "sha256:0"}}))
    return run / "model" / "README.md"


def plan(m, *extra) -> list[str]:
    return ["dots.plan", "backbone=custom", f"backbone.base={m['base']}", f"+backbone.sources.sft={m['sft']}", *extra]


CASES: dict[str, tuple[Callable, str]] = {
    # destinations: symbolic link loops, for every writer
    "merge_output_loop": (lambda m, w: merge(m, w, output=m["loop"]), "loop of symbolic links"),
    "search_run_dir_loop": (lambda m, w: search(m, w, f"run_dir={m['loop']}"), "loop of symbolic links"),
    "search_export_dir_loop": (lambda m, w: search(m, w, f"export.dir={m['loop']}"), "loop of symbolic links"),
    "search_cache_dir_loop": (lambda m, w: search(m, w, f"cache_dir={m['loop']}"), "loop of symbolic links"),
    "evaluate_output_loop": (lambda m, w: evaluate(m, w, f"output_dir={m['loop']}"), "loop of symbolic links"),
    "convert_output_loop": (lambda m, w: ["dots.io", "convert", str(m["bin"]), str(m["loop"])], "loop of symbolic"),
    "analyze_output_loop": (
        lambda m, w: [
            "dots.analyze",
            "backbone=custom",
            f"backbone.base={m['base']}",
            *[f"+backbone.sources.{k}={m[k]}" for k in ("sft", "rlvr")],
            f"output={m['loop']}",
        ],
        "loop of symbolic links",
    ),
    # destinations: equal to another, or a cache
    "search_export_dir_is_run_dir": (lambda m, w: search(m, w, f"export.dir={w / 'run'}"), "same directory"),
    "search_cache_dir_is_run_dir": (lambda m, w: search(m, w, f"cache_dir={w / 'run'}"), "same directory"),
    "merge_cache_dir_is_output": (lambda m, w: merge(m, w, f"cache_dir={w / 'merged'}"), "same directory"),
    "merge_cache_dir_inside_output": (lambda m, w: merge(m, w, f"cache_dir={w / 'merged' / 'c'}"), "lies inside"),
    # config.json against the weights
    "search_hidden_size": (lambda m, w: search(m, w, sources=("sft", "hidden")), r"hidden\/config\.json: hidden_size"),
    "evaluate_hidden_size": (lambda m, w: evaluate(m, w, model=m["hidden"]), r"hidden/config\.json: hidden_size"),
    "merge_hidden_size": (lambda m, w: merge(m, w, sources=("sft", "hidden")), r"hidden/config\.json: hidden_size"),
    "merge_llama_config_on_qwen2": (lambda m, w: merge(m, w, sources=("sft", "llama_config")), "q_proj.bias"),
    "search_layers": (lambda m, w: search(m, w, sources=("sft", "layers")), "num_hidden_layers is 3"),
    "plan_truncated_shapes": (lambda m, w: plan(m, f"--shapes={m['truncated_config']}"), "truncated_config.json"),
    # the tokenizer
    "evaluate_truncated_tokenizer": (lambda m, w: evaluate(m, w, model=m["bad_tokenizer"]), "tokenizer.json"),
    "search_truncated_tokenizer": (lambda m, w: search(m, w, sources=("sft", "bad_tokenizer")), "tokenizer.json"),
    "merge_truncated_tokenizer": (
        lambda m, w: merge(m, w, f"backbone.base={m['base_bad_tokenizer']}"),
        "base_bad_tokenizer/tokenizer.json",
    ),
    # sources against the base
    "merge_every_source_is_the_base": (lambda m, w: merge(m, w, sources=("base_copy", "base")), "every source"),
    "search_every_source_is_the_base": (lambda m, w: search(m, w, sources=("base_copy", "base")), "every source"),
    # numbers of plan, doctor and lab
    "plan_memory_nan": (lambda m, w: plan(m, "--device-memory-gb", "nan"), "--device-memory-gb"),
    "plan_memory_negative": (lambda m, w: plan(m, "--device-memory-gb=-4"), "--device-memory-gb"),
    "doctor_layers_negative": (lambda m, w: ["dots.doctor", "--layers", "-1"], "--layers"),
    "lab_zero_steps": (lambda m, w: ["dots.lab", "base.steps=0"], "base.steps"),
    "lab_fraction_above_one": (lambda m, w: ["dots.lab", "tasks.slip_rate=1.5"], "tasks.slip_rate"),
    "lab_build_without_weights": (
        lambda m, w: ["dots.lab", "--rebuild", "eval.enabled=false", f"#{fake_lab_build_without_weights(w)}"],
        "model.safetensors",
    ),
    "lab_outputs_uncreatable": (
        lambda m, w: ["dots.lab", "--rebuild", "eval.enabled=false", "@DOTS_OUTPUTS=a_file"],
        "lab outputs",
    ),
    # a run directory belongs to one search; a user's edit is not replaced
    "search_run_dir_of_another_search": (
        lambda m, w: search(m, w, f"run_dir={another_search_in(w / 'other')}"),
        "identity 0123456789abcdef; this search is [0-9a-f]{16}",
    ),
    "search_export_readme_edited": (
        lambda m, w: search(m, w, f"#{edited_export_in(w / 'run')}"),
        r"run/model/README\.md: it changed since dots wrote it",
    ),
    # messages that say what is true
    "pool_is_a_directory": (lambda m, w: search(m, w, pool=m["pool_dir"]), "pool_dir is a directory, not a file"),
}


def _command(args: list[str], m: dict, env: dict) -> list[str]:
    """`args` without the markers: `#...` (a note, dropped) and `@NAME=input` (an environment
    variable set to an input's path)."""
    kept = []
    for arg in args:
        if arg.startswith("@"):
            name, key = arg[1:].split("=", 1)
            env[name] = str(m[key] / "outputs")
        elif not arg.startswith("#"):
            kept.append(arg)
    return kept


@pytest.mark.parametrize("case", list(CASES))
def test_a_contradiction_is_one_line_exit_2_before_any_write(case, inputs, tmp_path):
    make_args, message = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    env = isolated_env(work)
    args = _command(make_args(inputs, work), inputs, env)
    assert_refused(args, work, env, [tmp_path, inputs["root"]], message)


@pytest.mark.parametrize(
    "sources, odd",
    [
        (("base_copy", "sft"), "source base_copy .* task vector is all zeros"),
        (("sft", "sft_copy"), "identical weights"),
    ],
)
def test_an_odd_source_merges_with_one_warning_line(sources, odd, inputs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    args = merge(inputs, work, "method=task_arithmetic", sources=sources)
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=work, env=isolated_env(work), capture_output=True, text=True
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("warning: ") and re.search(odd, lines[0]), proc.stderr
    assert (work / "merged" / "model.safetensors").exists()


# --- in-process: the records, a run's identity, cache_dir, messages ----------------------------------


def _export(tmp_path: Path, run_dir: Path, overwrite: bool = False) -> Path:
    dest = claim(tmp_path / "model", "export", overwrite, run_dir=run_dir)
    with CheckpointWriter(dest, {"a": TensorInfo((1,), torch.float32)}) as w:
        w.write("a", torch.ones(1))
        w.add_file("README.md", "the card dots wrote\n")
        return w.commit()


def test_a_rerun_replaces_only_files_whose_content_dots_recorded(tmp_path):
    model = _export(tmp_path, tmp_path / "run")
    digests = read_record(model)["digests"]
    assert {"README.md", "model.safetensors"} <= set(digests)
    assert digests["README.md"].startswith("sha256:")
    _export(tmp_path, tmp_path / "run")  # untouched: the same search replaces its export
    (model / "README.md").write_text("my edit\n")
    with pytest.raises(DotsError, match=r"README\.md: it changed since dots wrote it .*export\.overwrite=true"):
        _export(tmp_path, tmp_path / "run")
    assert (model / "README.md").read_text() == "my edit\n"
    _export(tmp_path, tmp_path / "run", overwrite=True)  # the export's own overwrite option replaces it
    assert (model / "README.md").read_text() == "the card dots wrote\n"


def test_a_run_directory_belongs_to_one_search(tmp_path):
    run = claim(tmp_path / "run", "search-run", identity="a" * 16).create()
    assert read_record(run)["identity"] == "a" * 16
    claim(run, "search-run", identity="a" * 16).create()  # the same search resumes
    with pytest.raises(DotsError, match=f"identity {'a' * 16}; this search is {'b' * 16}.*replace_run=true"):
        claim(run, "search-run", identity="b" * 16)
    claim(run, "search-run", overwrite=True, identity="b" * 16).create()  # replace_run=true
    assert read_record(run)["identity"] == "b" * 16


def test_a_search_records_its_identity_and_refuses_another(tiny, tmp_path):
    from dots.search.pipeline import check_destinations, prepare

    ovr = overrides(tiny, tmp_path / "run", trials=2, extra=["export.enabled=false"])
    run = prepare(compose(ovr))
    check_destinations(run).create()
    other = prepare(compose([*ovr, "sparsify.density=0.5"]))
    with pytest.raises(DotsError, match="another search"):
        check_destinations(other)
    check_destinations(prepare(compose([*ovr, "sparsify.density=0.5", "replace_run=true"]))).create()


def test_cache_dir_is_one_root_for_merge_and_search(inputs, tmp_path):
    from dots.io.inputs import taskvec_dir
    from dots.merge.executor import merge_checkpoints
    from dots.vectors.cache import build_task_vectors

    cache = tmp_path / "cache"
    sources = {k: inputs[k] for k in ("sft", "rlvr")}
    merge_checkpoints(inputs["base"], sources, tmp_path / "merged", method="dots_fixed", cache_dir=cache)
    assert taskvec_dir(cache) == cache.resolve() / "taskvec"
    assert len(list((cache / "taskvec").glob("*/taskvec.json"))) == 2
    claim(taskvec_dir(cache), "taskvec-cache")  # what dots.search claims: the merge's own entries
    # an older search's layout (entries right in cache_dir) is read where it is
    from dots.io.checkpoint import Checkpoint

    old = tmp_path / "old"
    build_task_vectors(Checkpoint(inputs["base"]), {"sft": Checkpoint(inputs["sft"])}, cache_root=old)
    listing = sorted(p.name for p in old.iterdir())
    assert taskvec_dir(old) == old.resolve() and sorted(p.name for p in old.iterdir()) == listing
    # a cache root holding a user's files is refused like any destination
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.md").write_text("mine")
    with pytest.raises(DotsError, match="notes.md"):
        taskvec_dir(tmp_path / "project")


def test_messages_say_what_is_true(tmp_path, monkeypatch, caplog):
    from dots.engines.factory import resolve_engine_name
    from dots.io.checkpoint import offline
    from dots.plan.decide import size
    from dots.plan.render import count

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert offline()
    assert (size(174_210), size(3_500_000), size(15.2e9)) == ("174.21 kB", "3.50 MB", "15.20 GB")
    assert (count(87_100), count(494e6), count(7.62e9)) == ("87.10 K", "494.00 M", "7.62 B")
    with caplog.at_level("INFO", logger="dots"):
        resolve_engine_name("auto"), resolve_engine_name("auto")
    assert len([r for r in caplog.records if "engine=auto" in r.getMessage()]) <= 1
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / RECORD).write_text(json.dumps({"kind": "merge", "files": []}))
    with pytest.raises(DotsError, match="not an export one"):
        claim(merged, "export")
