"""Every bad input, through the real command lines, stops before anything is written.

Each case runs `python -m dots.<verb>` as a subprocess with its working directory, outputs
root (DOTS_OUTPUTS) and caches (HF_HOME, XDG_CACHE_HOME) inside a temporary tree, and
asserts: exit code 2, exactly one line on stderr, no traceback, and no file or directory
created or changed anywhere in that tree or in the input checkpoints. No case needs an
engine: validation happens before one would start.
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
from helpers import REPO, require_vllm, unavailable


@pytest.fixture(scope="module")
def inputs(tiny_family, checkpoints, tmp_path_factory) -> dict[str, Path]:
    """Good and broken checkpoints and pools (copied or built once; the snapshot covers them too)."""
    root = tmp_path_factory.mktemp("bad_inputs")
    family = tiny_family("qwen_bf16_and_sharded")
    made = {
        "base": family.base,
        "sft": family.sources["sft"],
        "rlvr": family.sources["rlvr"],
        "wider": checkpoints({"dtype": torch.bfloat16, "hidden_size": 96, "num_heads": 2}).base,
        "llama": checkpoints({"arch": "llama", "dtype": torch.bfloat16}).base,
    }
    m = {"root": root, **{k: Path(shutil.copytree(p, root / k)) for k, p in made.items()}}
    sharded = Path(shutil.copytree(family.sources["sharded"], root / "missing_shard"))
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    m["missing_shard"] = sharded
    truncated = shutil.copytree(m["sft"], root / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    m["truncated"] = truncated
    bad_config = shutil.copytree(m["sft"], root / "bad_config")
    (bad_config / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"], "hidden_size": ')
    m["bad_config"] = bad_config
    (root / "pool.jsonl").write_text(
        "\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(6))
    )
    (root / "empty.jsonl").write_text("")
    (root / "malformed.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+2=\n')
    m["pool"], m["empty_pool"], m["malformed_pool"] = (
        root / "pool.jsonl",
        root / "empty.jsonl",
        root / "malformed.jsonl",
    )
    m["a_file"] = root / "a_file"
    m["a_file"].write_text("not a directory")
    m["existing"] = root / "existing_output"
    m["existing"].mkdir()
    (m["existing"] / "keep.txt").write_text("mine")
    return m


@pytest.fixture(scope="module")
def readonly_dir(inputs):
    """A read-only directory that root cannot write either: a read-only tmpfs mount (None
    when mounting is not permitted and we are root, for whom chmod is no barrier)."""
    path = inputs["root"] / "readonly"
    path.mkdir()
    mounted = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(path)], capture_output=True).returncode
        == 0
    )
    if not mounted:
        if os.geteuid() == 0:
            yield None
            return
        path.chmod(0o555)
    yield path
    if mounted:
        subprocess.run(["umount", str(path)], check=False)


# --- the command lines -----------------------------------------------------------------------------


def search(m, w, *extra, base=None, sources=("sft", "rlvr"), pool=None):
    """A cheap search on the tiny family (it would run, were its input good)."""
    return [
        "dots.search",
        "engine=hf",
        "backbone=custom",
        "backbone.name=tiny",
        f"backbone.base={base or m['base']}",
        "backbone.prompt=plain",
        "backbone.max_tokens=4",
        *[f"+backbone.sources.{k}={m.get(k, k)}" for k in sources],
        "pool=jsonl",
        f"pool.path={pool or m['pool']}",
        "selection.n=2",
        "selection.m=2",
        "search.n_trials=2",
        "search.k=2",
        f"run_dir={w / 'run'}",
        *extra,
    ]


def search_with_source(key):
    return lambda m, w: search(m, w, sources=("sft", key))


def merge(m, w, *extra, sources=("sft", "rlvr"), output=None):
    return [
        "dots.merge",
        "backbone=custom",
        f"backbone.base={m['base']}",
        *[f"+backbone.sources.{k}={m.get(k, k)}" for k in sources],
        f"output={output or w / 'merged'}",
        *extra,
    ]


def evaluate(m, w, *extra, model=None):
    return [
        "dots.evaluate",
        "engine=hf",
        "include_backbone=false",
        f"+models.x={model or m['sft']}",
        "benchmarks=[lab_add]",
        "limit=2",
        f"output_dir={w / 'eval'}",
        *extra,
    ]


CASES: dict[str, tuple[Callable, str]] = {
    # checkpoints
    "search_nonexistent_base": (lambda m, w: search(m, w, base="/nonexistent/base"), "does not exist"),
    "merge_nonexistent_base": (lambda m, w: merge(m, w, "backbone.base=/nonexistent/base"), "does not exist"),
    "evaluate_nonexistent_model": (lambda m, w: evaluate(m, w, model="/nonexistent/model"), "does not exist"),
    "missing_shard": (search_with_source("missing_shard"), "missing shard"),
    "shape_mismatch": (search_with_source("wider"), "shapes differ"),
    "other_architecture": (search_with_source("llama"), "architectures differ"),
    "truncated_safetensors": (search_with_source("truncated"), "truncated"),
    "merge_truncated_safetensors": (lambda m, w: merge(m, w, sources=("sft", "truncated")), "truncated"),
    "malformed_config_json": (search_with_source("bad_config"), "config.json"),
    "merge_malformed_config_json": (lambda m, w: merge(m, w, sources=("sft", "bad_config")), "config.json"),
    "evaluate_malformed_config_json": (lambda m, w: evaluate(m, w, model=m["bad_config"]), "config.json"),
    "export_malformed_config_json": (
        lambda m, w: ["dots.export", "push", str(m["bad_config"]), "org/name"],
        "config.json",
    ),
    "export_not_a_model": (lambda m, w: ["dots.export", "push", str(w / "nothing"), "org/name"], "not an exported"),
    # pools
    "empty_pool": (lambda m, w: search(m, w, pool=m["empty_pool"]), "no query"),
    "malformed_pool": (lambda m, w: search(m, w, pool=m["malformed_pool"]), "not JSON"),
    "missing_pool": (lambda m, w: search(m, w, pool=m["root"] / "nope.jsonl"), "does not exist"),
    "custom_backbone_without_pool": (lambda m, w: [a for a in search(m, w) if not a.startswith("pool")], "pool"),
    # options
    "inverted_range": (lambda m, w: search(m, w, "search.range=[2,1]"), "inverted"),
    "zero_trials": (lambda m, w: search(m, w, "search.n_trials=0"), "n_trials must be >= 1"),
    "negative_trials": (lambda m, w: search(m, w, "search.n_trials=-3"), "n_trials must be >= 1"),
    "zero_samples": (lambda m, w: search(m, w, "search.k=0"), "search.k must be >= 1"),
    "zero_selection": (lambda m, w: search(m, w, "selection.n=0"), "selection.n must be >= 1"),
    "density_0": (lambda m, w: search(m, w, "sparsify.density=0"), r"density must be in \(0, 1\]"),
    "density_1.5": (lambda m, w: search(m, w, "sparsify.density=1.5"), r"density must be in \(0, 1\]"),
    "merge_density_0": (lambda m, w: merge(m, w, "method=ties", "method.density=0"), r"density must be in \(0, 1\]"),
    "merge_density_1.5": (
        lambda m, w: merge(m, w, "method=ties", "method.density=1.5"),
        r"density must be in \(0, 1\]",
    ),
    "unknown_scope": (lambda m, w: search(m, w, "sparsify.scope=layer"), "scope"),
    "unknown_rescale": (lambda m, w: search(m, w, "sparsify.rescale=some"), "rescale"),
    "unknown_strategy": (lambda m, w: search(m, w, "selection.strategy=hardest"), "strategy"),
    "unknown_pick": (lambda m, w: search(m, w, "backbone.pick=best"), "pick"),
    "no_sources": (lambda m, w: search(m, w, sources=()), "source"),
    "merge_no_sources": (lambda m, w: merge(m, w, sources=()), "source"),
    "unknown_method": (lambda m, w: merge(m, w, "method=nope"), "unknown method 'nope'"),
    "existing_output": (lambda m, w: merge(m, w, output=m["existing"]), r"did not write .*keep\.txt"),
    "dare_p_1": (lambda m, w: merge(m, w, "method=dare_ties", "method.p=1.0"), r"\[0, 1\)"),
    "dare_p_1.5": (lambda m, w: merge(m, w, "method=dare_linear", "method.p=1.5"), r"\[0, 1\)"),
    "sar_three_sources": (lambda m, w: merge(m, w, "method=sar", sources=("sft", "rlvr", "base")), "exactly 2 sources"),
    # where it would write
    "run_dir_readonly": (lambda m, w: search(m, w, f"run_dir={m['readonly'] / 'run'}"), "cannot"),
    "run_dir_parent_is_a_file": (lambda m, w: search(m, w, f"run_dir={m['a_file'] / 'run'}"), "not a directory"),
    "run_dir_in_proc": (lambda m, w: search(m, w, "run_dir=/proc/dots-run"), "cannot"),
    "run_dir_in_sys": (lambda m, w: search(m, w, "run_dir=/sys/dots-run"), "cannot"),
    "export_dir_parent_is_a_file": (
        lambda m, w: search(m, w, f"export.dir={m['a_file'] / 'model'}"),
        "not a directory",
    ),
    "cache_dir_parent_is_a_file": (lambda m, w: search(m, w, f"cache_dir={m['a_file'] / 'cache'}"), "not a directory"),
    "merge_output_readonly": (lambda m, w: merge(m, w, output=m["readonly"] / "merged"), "cannot"),
    "merge_output_parent_is_a_file": (lambda m, w: merge(m, w, output=m["a_file"] / "merged"), "not a directory"),
    "evaluate_output_in_proc": (lambda m, w: evaluate(m, w, "output_dir=/proc/dots-eval"), "cannot"),
    # the command line itself
    "key_typo": (lambda m, w: search(m, w, "serach.n_trials=3"), "did you mean search"),
    "nested_key_typo": (lambda m, w: search(m, w, "search.n_trial=3"), "did you mean search.n_trials"),
    "added_key_typo": (lambda m, w: search(m, w, "+search.n_trial=3"), "did you mean search.n_trials"),
    "merge_key_typo": (lambda m, w: merge(m, w, "overwrit=true"), "did you mean overwrite"),
    "evaluate_key_typo": (lambda m, w: evaluate(m, w, "limt=2"), "did you mean limit"),
    "unknown_engine": (lambda m, w: search(m, w, "engine=vlm"), "did you mean vllm"),
    "unknown_backbone": (lambda m, w: search(m, w, "backbone=nope"), "unknown backbone 'nope'"),
    "unknown_method_option": (lambda m, w: merge(m, w, "method=ties", "+method.dnesity=0.2"), "dnesity"),
    "unknown_engine_option": (
        lambda m, w: search(m, w, "engine=vllm", "+engine.extra_args.bogus_option=1"),
        "bogus_option",
    ),
    "bad_value_type": (lambda m, w: search(m, w, "search.n_trials=many"), "n_trials"),
}

NEEDS = {"run_dir_readonly": "readonly", "merge_output_readonly": "readonly"}


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under `roots`: files with size and mtime (directories by name only; a probe
    made and removed again changes a directory's mtime, not its contents)."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for d in dirs:
                out[os.path.join(dirpath, d)] = ("dir",)
            for f in files:
                st = os.lstat(os.path.join(dirpath, f))
                out[os.path.join(dirpath, f)] = (st.st_size, st.st_mtime_ns)
    return out


def isolated_env(work: Path) -> dict[str, str]:
    """The environment of a command under test: outputs and caches under `work`, offline, this
    checkout's dots first."""
    env = {k: v for k, v in os.environ.items() if k not in ("DOTS_CACHE", "HF_HUB_CACHE", "TRANSFORMERS_CACHE")}
    env.update(
        DOTS_OUTPUTS=str(work / "outputs"),
        HF_HOME=str(work / "hf"),
        XDG_CACHE_HOME=str(work / "xdg"),
        DOTS_PROGRESS="0",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return env


def assert_refused(args: list[str], work: Path, env: dict[str, str], roots: list[Path], message: str) -> None:
    """`python -m args…` exits 2 with one `error:` line matching `message`, no traceback, and
    nothing under `roots` created, changed or removed."""
    before = snapshot(*roots)
    proc = subprocess.run([sys.executable, "-m", *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    after = snapshot(*roots)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert re.search(message, lines[0]), lines[0]
    created = sorted(set(after) - set(before))
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    removed = sorted(set(before) - set(after))
    assert not created and not changed and not removed, (created, changed, removed)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, inputs, readonly_dir, tmp_path):
    if case in NEEDS:
        if readonly_dir is None:
            unavailable("no read-only directory: mounting is not permitted and root ignores modes (CI mounts as root)")
        inputs = {**inputs, "readonly": readonly_dir}
    if case == "unknown_engine_option":
        require_vllm()
    make_args, message = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    args = make_args(inputs, work)
    assert_refused(args, work, isolated_env(work), [tmp_path, inputs["root"]], message)
