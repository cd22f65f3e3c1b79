"""`python -m dots.merge` driven in the pytest process (issue #49): tests/test_merge.py runs the command
in a subprocess, where mutmut sees none of its calls, so `main`, `run_from_config`, `check_method` and
`merge` of dots/merge/__main__.py had every mutant "no tests". Here each is called in process on the
tiny bf16 family (tests/conftest.py): the output it writes against `merge_checkpoints` given the same
options, its one-line errors, its help. Also `default_fisher_root`, reached through `fisher_for`."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import dots.merge.__main__ as merge_command
import dots.runtime.progress as progress
from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.records import RECORD, read_record
from dots.merge.calibration import CalibrationExample
from dots.merge.executor import merge_checkpoints
from dots.merge.fisher import fisher_for
from dots.options.compose import compose
from dots.options.merge import Calibration, merge_options
from dots.testing import put_in_hub_cache

# The lab backbone's calibration (conf/merge.yaml's default backbone: conf/backbone/lab.yaml picks
# conf/pool/lab.yaml, and its prompt is `plain`); the device is merge.yaml's `auto`.
LAB_POOL = {"kind": "lab", "split": "pool", "size": 256, "skills": ["add", "sub"], "lab_overrides": []}


@pytest.fixture(autouse=True)
def process_state_restored(monkeypatch):
    """`main` sets the dots logger's level, a SIGTERM handler and the root logger's terminal for the
    command's process: all put back after each test, so the rest of the session runs as before. The
    test starts without the terminal handlers and held lines a command run earlier in this process
    left (one may write to a stream pytest has closed since)."""
    logger, root = logging.getLogger("dots"), logging.getLogger()
    level, handler, handlers = logger.level, signal.getsignal(signal.SIGTERM), list(root.handlers)
    root.handlers[:] = [h for h in handlers if type(h) is not logging.StreamHandler and h is not progress._HELD]
    monkeypatch.setattr(progress._HELD, "target", None)
    monkeypatch.setattr(progress._HELD, "buffer", [])
    yield
    logger.setLevel(level)
    signal.signal(signal.SIGTERM, handler)
    root.handlers[:] = handlers


def load_state(path: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def run_main(args: list[str], capsys) -> tuple[int, str, list[str]]:
    """`main(args)`: (exit code, stdout, the non-blank lines of stderr)."""
    capsys.readouterr()
    code = 0
    try:
        merge_command.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def family_args(family, **paths: Path) -> list[str]:
    sources = {**family.sources, **paths}
    return [f"backbone.base={family.base}", *(f"+backbone.sources.{k}={sources[k]}" for k in ("sft", "rlvr"))]


def test_the_command_merges_with_every_option_it_is_given(qwen_bf16, tmp_path, capsys):
    """`main` → `run_from_config` → `merge`: the output (replacing a previous merge, overwrite=true)
    is what `merge_checkpoints` writes with the same method, options, weights, config_from, shard size
    and calibration — tensors, shards, config.json, the record's identity — plus the composed
    configuration in the card; the command prints the output path."""
    rlvr = Path(shutil.copytree(qwen_bf16.sources["rlvr"], tmp_path / "rlvr"))
    config = json.loads((rlvr / "config.json").read_text())
    assert config["initializer_range"] != 0.03
    config["initializer_range"] = 0.03  # the output's config.json tells whose it is (config_from)
    (rlvr / "config.json").write_text(json.dumps(config))
    sources = {"sft": qwen_bf16.sources["sft"], "rlvr": rlvr}
    out = merge_checkpoints(qwen_bf16.base, sources, tmp_path / "merged", method="linear")
    cache = tmp_path / "cache"
    options = ["method.density=0.5", "method.weights={sft:0.25,rlvr:1.5}", "backbone.config_from=rlvr"]
    sizes = ["max_shard_bytes=40000", "block_entries=1000", f"cache_dir={cache}"]
    args = ["method=ties", *options, *family_args(qwen_bf16, rlvr=rlvr), *sizes, f"output={out}", "overwrite=true"]
    code, stdout, errors = run_main(args, capsys)
    assert (code, errors) == (0, ["config field initializer_range differs: {'base': 0.02, 'rlvr': 0.03}"])
    assert stdout.splitlines() == [str(out)]

    calibration = Calibration(pool=LAB_POOL, prompt="plain", tokenizer=str(qwen_bf16.base), device="auto")
    api = merge_checkpoints(
        qwen_bf16.base,
        sources,
        tmp_path / "api",
        method="ties",
        options={"density": 0.5},
        weights={"sft": 0.25, "rlvr": 1.5},
        config_from="rlvr",
        max_shard_bytes=40000,
        calibration=calibration,
    )
    shards = sorted(p.name for p in out.glob("model*"))
    assert len(shards) > 2 and shards == sorted(p.name for p in api.glob("model*"))  # 40 KB shards + index
    got, want = load_state(out), load_state(api)
    assert got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in want)
    default = load_state(merge_checkpoints(qwen_bf16.base, sources, tmp_path / "plain", method="ties"))
    assert not all(torch.equal(default[n], want[n]) for n in want)  # the options do change the tensors
    assert json.loads((out / "config.json").read_text())["initializer_range"] == 0.03
    assert json.loads((out / "config.json").read_text()) == json.loads((api / "config.json").read_text())
    record, expected = read_record(out), read_record(api)
    assert record is not None and expected is not None and record["identity"] == expected["identity"]
    card = (out / "README.md").read_text()
    assert "## Full configuration" in card and "## Full configuration" not in (api / "README.md").read_text()
    assert "density: 0.5" in card and f"cache_dir: {cache}" in card
    assert card.split("## Full configuration")[0].rstrip() == (api / "README.md").read_text().rstrip()


def test_the_command_replaces_only_a_merge_output_with_overwrite(qwen_bf16, tmp_path, capsys):
    """Without overwrite=true an existing merge output is kept: one `error:` line, exit code 2."""
    out = merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "merged", method="linear")
    before = (out / "model.safetensors").read_bytes()
    code, stdout, errors = run_main(["method=ties", *family_args(qwen_bf16), f"output={out}"], capsys)
    assert code == 2 and stdout == "" and len(errors) == 1, errors
    assert errors[0].startswith("error: ") and "output exists" in errors[0] and "overwrite=true" in errors[0]
    assert (out / "model.safetensors").read_bytes() == before


def test_a_cache_dir_holding_other_files_is_refused_before_anything_is_written(qwen_bf16, tmp_path, capsys):
    """cache_dir reaches the merge: a folder holding a file dots did not write is refused (one line
    naming cache_dir) and no output appears."""
    cache = tmp_path / "mine"
    cache.mkdir()
    (cache / "notes.txt").write_text("mine")
    out = tmp_path / "merged"
    code, stdout, errors = run_main(
        ["method=linear", *family_args(qwen_bf16), f"cache_dir={cache}", f"output={out}"], capsys
    )
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: "), errors
    assert "cache_dir" in errors[0] and "notes.txt" in errors[0]
    assert not out.exists() and (cache / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["method.density=0"], "error: method.density must be in (0, 1], got 0"),
        (["+method.colour=red"], "error: unknown option(s) for method ties: colour (known: density, scale)"),
        (["backbone.config_from=null"], "error: backbone.config_from is not set (base or a source key)"),
        (["method.name=nope"], "error: unknown merge method 'nope'"),
    ],
)
def test_a_bad_option_is_one_error_line_and_nothing_written(qwen_bf16, tmp_path, capsys, extra, message):
    """A bad method option, an unknown method or no config_from: exit code 2, one `error:` line (the
    method's options are checked by `check_method` first), nothing at the output path."""
    out = tmp_path / "merged"
    code, stdout, errors = run_main(["method=ties", *family_args(qwen_bf16), *extra, f"output={out}"], capsys)
    assert (code, stdout) == (2, "")
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert not out.exists() and not list(tmp_path.glob(".merged*"))


def test_check_method_checks_the_methods_own_options():
    """`check_method` builds the method's options dataclass: a bad value is a DotsError naming it;
    good ones pass."""
    cfg = compose(
        "merge", ["method=ties", "method.density=1.5", "backbone.base=/b", "++backbone.sources.sft=/s", "output=/o"]
    )
    options = merge_options(cfg, ["sft"])
    with pytest.raises(DotsError, match=r"method\.density must be in \(0, 1\]"):
        merge_command.check_method(options)
    good = merge_options(compose("merge", ["backbone=custom", "backbone.base=/b", "method=dare", "output=/o"]), [])
    assert merge_command.check_method(good) is None


def test_run_from_config_keeps_only_the_sources_named_on_the_command_line(qwen_bf16, tmp_path):
    """`run_from_config(cfg, keep_sources)`: a source of the composed config that is not kept (here
    one whose path does not exist) is dropped before anything is read; the merge is the kept two's."""
    out = tmp_path / "merged"
    overrides = [f"backbone.base={qwen_bf16.base}", "method=linear", f"output={out}"]
    overrides += [f"++backbone.sources.{k}={p}" for k, p in qwen_bf16.sources.items()]
    overrides += ["+backbone.sources.ghost=/nonexistent/ghost"]
    assert merge_command.run_from_config(compose("merge", overrides), ["sft", "rlvr"]) == out
    want = load_state(merge_checkpoints(qwen_bf16.base, qwen_bf16.sources, tmp_path / "api", method="linear"))
    got = load_state(out)
    assert all(torch.equal(got[n], want[n]) for n in want)
    assert "ghost" not in (out / "README.md").read_text()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_the_modules_usage_and_merges_nothing(flag, tmp_path, capsys, monkeypatch):
    """-h / --help, given as arguments or on the process's command line (`sys.argv[1:]`), print the
    module's docstring (its usage) and nothing else."""
    monkeypatch.chdir(tmp_path)
    for argv in ([flag], [f"output={tmp_path / 'out'}", flag]):
        code, stdout, errors = run_main(argv, capsys)
        assert (code, errors, stdout) == (0, [], merge_command.__doc__ + "\n")
    assert "python -m dots.merge method=ties backbone.base=DIR_OR_ID" in merge_command.__doc__
    monkeypatch.setattr(sys, "argv", ["dots.merge", flag])
    code, stdout, errors = run_main(None, capsys)  # type: ignore[arg-type]
    assert (code, errors, stdout) == (0, [], merge_command.__doc__ + "\n")
    assert list(tmp_path.iterdir()) == []


def test_without_help_the_command_line_of_the_process_is_read(qwen_bf16, tmp_path, capsys, monkeypatch):
    """`main()` with no arguments reads `sys.argv[1:]`: here a merge without an output, one error."""
    monkeypatch.setattr(sys, "argv", ["dots.merge", "method=linear", *family_args(qwen_bf16)])
    code, stdout, errors = run_main(None, capsys)  # type: ignore[arg-type]
    assert (code, stdout) == (2, "") and errors == ["error: no output directory given (add output=DIR)"]


def test_a_hub_base_is_read_at_the_revision_given(qwen_bf16, tmp_path, capsys, monkeypatch):
    """backbone.revision reaches the merge: a base given as a Hub id whose cache holds only the
    revision `v1` (no `main`) merges at v1, and the card names the commit read; without the revision
    the base is not in the cache (one error line). Offline: huggingface_hub's cache and offline switch
    are set as HF_HUB_CACHE / HF_HUB_OFFLINE would set them when it is imported."""
    import huggingface_hub.constants

    commit = put_in_hub_cache(qwen_bf16.base, "dots-test/tiny-base", tmp_path / "hub", revision="v1").name
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["method=linear", *family_args(qwen_bf16)[1:], "backbone.base=dots-test/tiny-base"]
    code, stdout, errors = run_main([*args, "backbone.revision=v1", f"output={tmp_path / 'at-v1'}"], capsys)
    assert (code, errors, stdout) == (0, [], f"{tmp_path / 'at-v1'}\n")
    assert f"| base | `dots-test/tiny-base` | {commit} | |" in (tmp_path / "at-v1" / "README.md").read_text()
    code, stdout, errors = run_main([*args, f"output={tmp_path / 'at-main'}"], capsys)
    assert code == 2 and errors == [
        "error: model 'dots-test/tiny-base' is neither a local directory nor in the Hub cache (HF_HUB_OFFLINE is on)"
    ]


def test_fisher_tables_go_under_the_cache_root_by_default(qwen_bf16, own_dots_cache):
    """`fisher_for` without a cache root writes its table under <cache root>/fisher ($DOTS_CACHE)."""
    path = fisher_for(Checkpoint(qwen_bf16.base), [CalibrationExample("1+1=", "2")], max_new_tokens=2)
    assert path.parent == own_dots_cache / "fisher" and path.suffix == ".safetensors" and path.is_file()
    assert (own_dots_cache / "fisher" / RECORD).is_file()
