"""dots deletes only what it wrote (`dots.io.destination`, docs/outputs.md).

Every writer — merge, convert, search (run directory and export), evaluate, analyze, the τ̃
and Fisher caches — is pointed at each kind of bad destination: the current directory of a
project (`output=.`), the folder holding the input checkpoints, a folder inside an input,
a folder of other models, the home directory, another kind's dots output and `/`. Each
must stop with exit 2 and exactly one stderr line naming the directory and a file, no
traceback, and leave the output's parent, HOME, the inputs and the caches byte for byte as
they were. The headline cases of the issue run through the real command lines; the rest
call the writers in-process through the CLIs' own error handler. Then what is allowed: a
new or empty directory, and a previous output of the same kind, replaced file by file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from helpers import REPO, compose, overrides

from dots.errors import DotsError, cli_errors
from dots.io.checkpoint import Checkpoint
from dots.io.destination import RECORD, claim, read_record
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter

# --- the world a user's files live in ------------------------------------------------------


def snapshot(*roots: Path) -> dict[str, str]:
    """Every path under `roots` with the SHA-256 of its content ("dir" for folders)."""
    seen: dict[str, str] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for d in dirs:
                seen[os.path.join(folder, d)] = "dir"
            for f in files:
                path = os.path.join(folder, f)
                seen[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if not os.path.islink(path) else "link"
    return seen


@pytest.fixture(scope="module")
def world(tiny, tmp_path_factory):
    """A home with a user's files, a project, a folder of other models, a .bin checkpoint to
    convert, and real dots outputs of two kinds (a merge; a τ̃ cache) to point writers at."""
    from dots.merge.executor import merge_checkpoints
    from dots.vectors.cache import build_task_vectors

    root, base, srcs, pool = tiny
    top = tmp_path_factory.mktemp("world")
    home = top / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("export PS1='$ '\n")
    (home / ".ssh" / "id_ed25519").write_text("secret\n")
    project = top / "project"
    (project / "src").mkdir(parents=True)
    (project / "notes.md").write_text("my notes\n")
    (project / "src" / "main.py").write_text("print('hello')\n")
    models = top / "models"
    for name in ("llama-3-8b", "qwen2.5-7b"):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text('{"model_type": "llama"}\n')
        (models / name / "model.safetensors").write_bytes(b"\0" * 64)
    binsrc = top / "bin" / "ckpt"
    binsrc.mkdir(parents=True)
    torch.save(dict(Checkpoint(base).tensors()), binsrc / "pytorch_model.bin")
    (binsrc / "config.json").write_text((base / "config.json").read_text())
    merged = merge_checkpoints(base, {k: srcs[k] for k in ("sft", "rlvr")}, top / "dots-merge", method="linear")
    sources = {k: Checkpoint(srcs[k]) for k in ("sft", "rlvr")}
    build_task_vectors(Checkpoint(base), sources, cache_root=top / "dots-taskvec")
    return {"top": top, "home": home, "project": project, "models": models, "bin": binsrc, "merge": merged}


# --- the writers, as their command lines call them --------------------------------------------


def _merge(tiny, world, out):
    from dots.merge.executor import merge_checkpoints

    root, base, srcs, _ = tiny
    merge_checkpoints(base, {k: srcs[k] for k in ("sft", "rlvr")}, out, method="linear", overwrite=True)


def _convert(tiny, world, out):
    from dots.io.convert import convert_bin_to_safetensors

    convert_bin_to_safetensors(world["bin"], out, overwrite=True)


def _search_run(tiny, world, out):
    from dots.search.pipeline import run_search

    run_search(compose(overrides(tiny, out)))


def _search_export(tiny, world, out):
    from dots.search.pipeline import run_search

    run_search(compose(overrides(tiny, world["top"] / "runs" / "r1", extra=[f"export.dir={out}"])))


def _search_cache(tiny, world, out):
    from dots.search.pipeline import run_search

    args = [a for a in overrides(tiny, world["top"] / "runs" / "r2") if not a.startswith("cache_dir=")]
    run_search(compose([*args, f"cache_dir={out}"]))


def _evaluate(tiny, world, out):
    from dots.evaluate.run import run_evaluate
    from dots.options.compose import compose as dots_compose
    from dots.options.evaluate import evaluate_options

    root, base, srcs, _ = tiny
    args = ["engine=hf", "include_backbone=false", f"+models.x={srcs['sft']}", "benchmarks=[lab_add]", "limit=2"]
    run_evaluate(evaluate_options(dots_compose("evaluate", [*args, f"output_dir={out}"])))


def _analyze(tiny, world, out):
    from dots.analyze.run import AnalyzeConfig, analyze

    root, base, srcs, _ = tiny
    analyze(base, {k: srcs[k] for k in ("sft", "rlvr")}, out, AnalyzeConfig(figures=False))


def _fisher(tiny, world, out):
    from dots.merge.calibration import CalibrationExample
    from dots.merge.fisher import fisher_for

    root, base, srcs, _ = tiny
    fisher_for(Checkpoint(base), [CalibrationExample("1+1=", "2")], cache_root=out)


WRITERS: dict[str, tuple[Callable, str]] = {  # name: (call, the kind it writes)
    "merge": (_merge, "merge"),
    "convert": (_convert, "convert"),
    "search_run": (_search_run, "search-run"),
    "search_export": (_search_export, "export"),
    "taskvec_cache": (_search_cache, "taskvec-cache"),
    "evaluate": (_evaluate, "evaluate"),
    "analyze": (_analyze, "analyze"),
    "fisher_cache": (_fisher, "fisher-cache"),
}


def _inputs(writer: str, tiny, world) -> Path:
    """One input checkpoint of `writer` (the folder holding it holds the others)."""
    return {"convert": world["bin"], "evaluate": tiny[2]["sft"]}.get(writer, tiny[1])


BAD: dict[str, Callable] = {  # kind of destination: (writer, tiny, world) → the path given
    "cwd_of_a_project": lambda w, t, x: ".",
    "folder_holding_the_inputs": lambda w, t, x: _inputs(w, t, x).parent,
    "folder_inside_an_input": lambda w, t, x: _inputs(w, t, x) / "out",
    "folder_of_other_models": lambda w, t, x: x["models"],
    "home": lambda w, t, x: x["home"],
    "another_kinds_output": lambda w, t, x: x["top"] / ("dots-taskvec" if w == "merge" else "dots-merge"),
    "root": lambda w, t, x: Path("/"),
}


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_bad_destination_is_refused_before_any_write(writer, bad, tiny, world, monkeypatch, capsys):
    call, kind = WRITERS[writer]
    monkeypatch.setenv("HOME", str(world["home"]))
    monkeypatch.setenv("DOTS_OUTPUTS", str(world["top"] / "outputs"))
    monkeypatch.setenv("DOTS_CACHE", str(world["top"] / "cache"))
    monkeypatch.chdir(world["project"])
    given = BAD[bad](writer, tiny, world)
    directory = Path(given).resolve()
    watched = [world["top"], tiny[0], directory.parent if directory != Path("/") else world["home"]]
    before, listing = snapshot(*watched), sorted(os.listdir("/"))
    with pytest.raises(SystemExit) as stop:
        cli_errors(call)(tiny, world, given)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(directory) in lines[0] and f"{kind} output" in lines[0], lines[0]
    named = re.search(r"\(e\.g\. (.+?)\)", lines[0])
    assert named and os.path.lexists(named.group(1)) and Path(named.group(1)) != directory, lines[0]
    assert snapshot(*watched) == before and sorted(os.listdir("/")) == listing


# --- the issue's three reproductions, through the real command lines -----------------------------


def run_cli(module: str, args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DOTS_CACHE", "HF_HUB_CACHE")}
    env.update(
        HOME=str(home),
        DOTS_OUTPUTS=str(home / "outputs"),
        DOTS_PROGRESS="0",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def merge_args(tiny) -> list[str]:
    root, base, srcs, _ = tiny
    return [
        "method=task_arithmetic",
        f"backbone.base={base}",
        *(f"+backbone.sources.{k}={srcs[k]}" for k in ("sft", "rlvr")),
    ]


@pytest.mark.parametrize("case", ["merge_output_dot", "merge_output_holding_inputs", "search_export_dir_of_models"])
def test_the_issues_reproductions_through_the_cli(case, tiny, world):
    root = tiny[1].parent  # the directory holding the models (the session's shared family)
    if case == "merge_output_dot":
        module, args, cwd, named = (
            "dots.merge",
            [*merge_args(tiny), "output=.", "overwrite=true"],
            world["project"],
            "notes.md",
        )
    elif case == "merge_output_holding_inputs":
        module, args, cwd, named = (
            "dots.merge",
            [*merge_args(tiny), f"output={root}", "overwrite=true"],
            world["top"],
            "config.json",
        )
    else:
        args = overrides(tiny, world["top"] / "runs" / "cli", extra=[f"export.dir={world['models']}"])
        module, cwd, named = "dots.search", world["top"], "llama-3-8b/config.json"
    watched = [world["top"], root]
    before = snapshot(*watched)
    proc = run_cli(module, args, cwd, world["home"])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert named in lines[0] and "refusing to write" in lines[0], lines[0]
    assert snapshot(*watched) == before


# --- what is allowed ---------------------------------------------------------------------------


def test_new_empty_and_own_output_with_overwrite_replace_only_what_dots_wrote(tiny, tmp_path):
    from dots.merge.executor import merge_checkpoints

    root, base, srcs, _ = tiny
    sources = {k: srcs[k] for k in ("sft", "rlvr")}
    (tmp_path / "neighbour.txt").write_text("kept")
    new = merge_checkpoints(base, sources, tmp_path / "new" / "merged", method="linear", max_shard_bytes=40_000)
    record = read_record(new)
    assert record["kind"] == "merge" and record["dots_version"] and record["command"] and record["time"]
    assert sorted(record["files"] + [RECORD]) == sorted(p.name for p in new.iterdir())
    assert any(name.startswith("model-0") for name in record["files"])  # sharded
    (tmp_path / "empty").mkdir()
    assert merge_checkpoints(base, sources, tmp_path / "empty", method="linear") == (tmp_path / "empty").resolve()
    with pytest.raises(DotsError, match="overwrite=true"):
        merge_checkpoints(base, sources, new, method="ties")
    again = merge_checkpoints(base, sources, new, method="ties", overwrite=True)  # one shard now
    assert sorted(p.name for p in again.iterdir()) == sorted(read_record(again)["files"] + [RECORD])
    assert "model.safetensors" in read_record(again)["files"] and not list(again.glob("model-0*"))
    assert "ties" in (again / "README.md").read_text() and (tmp_path / "neighbour.txt").read_text() == "kept"


def test_a_file_that_appears_before_the_commit_stops_the_replacement(tmp_path):
    plan = {"a": TensorInfo((2,), torch.float32)}
    with CheckpointWriter(tmp_path / "out", plan) as w:
        w.write("a", torch.zeros(2))
        w.commit()
    old = snapshot(tmp_path / "out")
    with pytest.raises(DotsError, match=r"did not write.*late\.txt"):
        with CheckpointWriter(tmp_path / "out", plan, overwrite=True) as w:
            w.write("a", torch.ones(2))
            (tmp_path / "out" / "late.txt").write_text("theirs")
            w.commit()
    assert (tmp_path / "out" / "late.txt").read_text() == "theirs"
    assert {k: v for k, v in snapshot(tmp_path / "out").items() if not k.endswith("late.txt")} == old
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary directory left


def test_an_export_is_replaced_by_a_rerun_of_its_run_and_otherwise_only_with_overwrite(tmp_path):
    def export(run_dir: Path, overwrite: bool = False) -> None:
        dest = claim(tmp_path / "model", "export", overwrite, run_dir=run_dir)
        with CheckpointWriter(dest, {"a": TensorInfo((1,), torch.float32)}) as w:
            w.write("a", torch.ones(1))
            w.commit()

    export(tmp_path / "run1")
    assert read_record(tmp_path / "model")["run_dir"] == str((tmp_path / "run1").resolve())
    export(tmp_path / "run1")  # the same search, rerun
    with pytest.raises(DotsError, match="overwrite=true"):
        export(tmp_path / "run2")
    export(tmp_path / "run2", overwrite=True)
    assert read_record(tmp_path / "model")["run_dir"] == str((tmp_path / "run2").resolve())


def test_caches_discard_only_their_own_entries(tiny, tmp_path):
    from dots.vectors.cache import build_task_vectors

    root, base, srcs, _ = tiny
    sources = {"sft": Checkpoint(srcs["sft"])}
    legacy = tmp_path / "legacy"  # an older dots' cache: entries only, no record
    tv = build_task_vectors(Checkpoint(base), sources, cache_root=legacy)
    entry = tv.entries["sft"].path
    (legacy / RECORD).unlink()
    (entry / "taskvec.json").write_text("{damaged")
    (entry / "mine.txt").write_text("a user's file")
    with pytest.raises(DotsError, match="mine.txt"):
        build_task_vectors(Checkpoint(base), sources, cache_root=legacy)  # adopted, the damage found
    assert (entry / "mine.txt").read_text() == "a user's file" and read_record(legacy)["kind"] == "taskvec-cache"
    (entry / "mine.txt").unlink()
    rebuilt = build_task_vectors(Checkpoint(base), sources, cache_root=legacy)
    assert json.loads((rebuilt.entries["sft"].path / "taskvec.json").read_text())["version"]


def test_the_record_is_never_uploaded():
    from huggingface_hub.utils import filter_repo_objects

    from dots.export.hub import HUB_IGNORE

    files = ["config.json", "model.safetensors", RECORD, "README.md"]
    assert list(filter_repo_objects(files, ignore_patterns=HUB_IGNORE)) == [f for f in files if f != RECORD]


def test_a_lab_build_is_recorded_and_an_existing_build_is_kept(tmp_path):
    from dots.lab.config import load_config
    from dots.lab.model import new_model, save_model
    from dots.lab.tokenizer import build_char_tokenizer

    model = new_model(load_config().model, build_char_tokenizer(), seed=0)
    out = save_model(model, tmp_path / "lab" / "base-x", "bfloat16", {"stage": "base"})
    record = read_record(out)
    assert record["kind"] == "lab" and {"model.safetensors", "lab.json", "config.json"} <= set(record["files"])
    (out / "mine.txt").write_text("kept")
    save_model(model, out, "float32", {"stage": "again"})  # a concurrent builder finished first: theirs stays
    assert (out / "mine.txt").read_text() == "kept" and json.loads((out / "lab.json").read_text())["stage"] == "base"
