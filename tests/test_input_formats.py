"""Inputs checked against their format and each other before any work (issue #48), through the real
commands: safetensors headers whose spans overlap, leave a gap or stop short of the file's end; a
tensor defined in two weight files (without an index, or beside the one the index names); a source
tokenizer that gives the base's ids other texts; `.bin` files torch refuses or cannot map. Each
refusal is `python -m dots.<verb>` as tests/test_bad_inputs.py runs it (`assert_refused`): exit 2,
one `error:` line, no traceback, nothing created or changed (output, run directory, cache root).
A tokenizer that differs harmlessly merges with one `warning:` line; a legacy `.bin` converts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from test_bad_inputs import assert_refused, isolated_env, merge, search

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import write_file
from dots.io.vocab import Vocabulary, differences


class Pickled:
    """An object a `.bin` may hold that torch's weights_only unpickler refuses."""


def rewrite_header(file: Path, edit: Callable[[dict], None], extra: bytes = b"") -> None:
    """`file` with its safetensors header edited in place (its data section kept, `extra` appended)."""
    raw = file.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    file.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :] + extra)


def _point_at_earlier(header: dict) -> None:
    """The later of two same-sized tensors pointed at the earlier one's bytes."""
    entries = sorted((e["data_offsets"], n) for n, e in header.items() if n != "__metadata__")
    sizes: dict[int, str] = {}
    for (start, end), name in entries:
        if end - start in sizes:
            header[name]["data_offsets"] = header[sizes[end - start]]["data_offsets"]
            return
        sizes[end - start] = name
    raise AssertionError("no two tensors of one size")


def _drop_one(header: dict) -> None:
    """A tensor's entry removed (its bytes stay: a gap no tensor owns)."""
    name = sorted((e["data_offsets"], n) for n, e in header.items() if n != "__metadata__")[1][1]
    del header[name]


def _swap_tokens(model: Path, a: str, b: str) -> None:
    """`model`'s tokenizer.json with the ids of tokens `a` and `b` exchanged."""
    file = model / "tokenizer.json"
    content = json.loads(file.read_text())
    vocab = content["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    file.write_text(json.dumps(content))


@pytest.fixture(scope="module")
def inputs(tiny_family, tmp_path_factory) -> dict[str, Path]:
    """The tiny family's base, sft, rlvr and a sharded source copied, and broken copies of sft."""
    root = tmp_path_factory.mktemp("input_formats")
    family = tiny_family("qwen_bf16_and_sharded")
    m = {"root": root, "base": Path(shutil.copytree(family.base, root / "base"))}
    for key in ("sft", "rlvr", "sharded"):
        m[key] = Path(shutil.copytree(family.sources[key], root / key))

    def broken(name: str, source: str = "sft") -> Path:
        m[name] = Path(shutil.copytree(m[source], root / name))
        return m[name]

    rewrite_header(broken("overlap") / "model.safetensors", _point_at_earlier)
    rewrite_header(broken("gap") / "model.safetensors", _drop_one)
    rewrite_header(broken("trailing") / "model.safetensors", lambda h: None, extra=bytes(16))
    second = broken("two_files")
    write_file({"lm_head.weight": Checkpoint(second).get("lm_head.weight")}, second / "more.safetensors", {})
    sharded = broken("index_two_shards", "sharded")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    name, listed = next(iter(sorted(index.items())))
    other = sorted(set(index.values()) - {listed})[0]
    ckpt = Checkpoint(sharded)
    held = {n: ckpt.get(n) for n in sorted(index) if index[n] == other}
    write_file({**held, name: ckpt.get(name)}, sharded / other, {"format": "pt"})
    _swap_tokens(broken("tokenizer_clash"), "a", "b")
    harmless = broken("tokenizer_eos_template")
    config = json.loads((harmless / "tokenizer_config.json").read_text())
    config.update(eos_token="<pad>", chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (harmless / "tokenizer_config.json").write_text(json.dumps(config))
    m["pool"] = root / "pool.jsonl"
    m["pool"].write_text("".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(6)))
    m["bins"] = root / "bins"
    for kind, content in (
        ("refused", {"w": torch.ones(2), "extra": Pickled()}),
        ("legacy", {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3, dtype=torch.bfloat16)}),
        ("training", {"model": {"w": torch.ones(2)}, "step": 3}),
        ("garbage", None),
    ):
        (m["bins"] / kind).mkdir(parents=True)
        file = m["bins"] / kind / "pytorch_model.bin"
        if content is None:
            file.write_bytes(b"PK\x03\x04 not a checkpoint at all")
        else:
            torch.save(content, file, _use_new_zipfile_serialization=kind != "legacy")
        (m["bins"] / kind / "config.json").write_text("{}")
    return m


def convert(kind: str) -> Callable:
    return lambda m, w: ["dots.io", "convert", str(m["bins"] / kind), str(w / "converted")]


CASES: dict[str, tuple[Callable, str]] = {
    # safetensors headers: spans that overlap, leave a gap, or end before the file does
    "merge_overlap": (lambda m, w: merge(m, w, sources=("overlap", "rlvr")), r"overlap/model\.safetensors: tensors "),
    "search_overlap": (lambda m, w: search(m, w, sources=("overlap", "rlvr")), "the header points two tensors at"),
    "merge_gap": (lambda m, w: merge(m, w, sources=("gap", "rlvr")), r"after a gap of bytes \d+\.\.\d+"),
    "merge_trailing_bytes": (lambda m, w: merge(m, w, sources=("trailing", "rlvr")), "16 bytes follow the last"),
    # one tensor in two weight files
    "merge_two_files": (lambda m, w: merge(m, w, sources=("two_files", "rlvr")), "'lm_head.weight' is defined in two"),
    "search_index_two_shards": (
        lambda m, w: search(m, w, sources=("index_two_shards", "rlvr")),
        r"index\.json: tensor '.*' is listed in model-.*, but both",
    ),
    # tokenizers that give the base's ids other texts
    "merge_tokenizer_clash": (
        lambda m, w: merge(m, w, sources=("tokenizer_clash", "rlvr")),
        r"source tokenizer_clash's tokenizer .* gives id \d+ to 'b', the base's .* to 'a'; 2 ids differ",
    ),
    "search_tokenizer_clash": (lambda m, w: search(m, w, sources=("rlvr", "tokenizer_clash")), "mix different tokens"),
    # .bin files
    "convert_refused_pickle": (
        convert("refused"),
        r"refuses to load its pickle .*it names test_input_formats\.Pickled",
    ),
    "convert_training_checkpoint": (convert("training"), "entry 'model' is a dict, not a tensor"),
    "convert_not_a_checkpoint": (convert("garbage"), "cannot read .*pytorch_model.bin as a PyTorch checkpoint"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_is_one_line_before_any_write(case, inputs, tmp_path):
    make_args, message = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    assert_refused(make_args(inputs, work), work, isolated_env(work), [tmp_path, inputs["root"]], message)


def _run(args: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=work, env=isolated_env(work), capture_output=True, text=True, timeout=300
    )


def test_a_tokenizer_that_differs_harmlessly_merges_with_one_warning_line(inputs, tmp_path):
    proc = _run(merge(inputs, tmp_path, "method=task_arithmetic", sources=("tokenizer_eos_template", "rlvr")), tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("warning: source tokenizer_eos_template's tokenizer"), lines
    assert "eos_token '<pad>' (base '</s>')" in lines[0] and "the chat template" in lines[0], lines[0]
    assert (tmp_path / "merged" / "model.safetensors").exists()


def test_a_legacy_bin_converts_to_the_same_tensors(inputs, tmp_path):
    proc = _run(["dots.io", "convert", str(inputs["bins"] / "legacy"), str(tmp_path / "converted")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    out = Checkpoint(tmp_path / "converted")
    want = torch.load(inputs["bins"] / "legacy" / "pytorch_model.bin", weights_only=True)
    assert sorted(out.names) == sorted(want)
    assert all(out.get(n).dtype == t.dtype and out.get(n).equal(t) for n, t in want.items())


# --- in-process: what is a clash, what a harmless difference, what extra vocabulary ------------------


def _vocab(tokens: dict[int, str], **kw) -> Vocabulary:
    roles = {r: kw.pop(r, None) for r in ("bos_token", "eos_token", "pad_token", "unk_token")}
    fields = {"special": frozenset(), "template": None, "rules": None, **kw}
    return Vocabulary(Path("t"), tokens, roles, **fields)


def test_only_an_id_that_changes_its_text_is_refused():
    base = _vocab({0: "<s>", 1: "a", 2: "b"}, eos_token="<s>")
    assert differences(base, _vocab({0: "<s>", 1: "a", 2: "b", 3: "c"}, eos_token="<s>"), 3, "s") == []
    inside = differences(base, _vocab({0: "<s>", 1: "a", 2: "b", 3: "c"}, eos_token="<s>"), 5, "s")
    assert inside == ["adds 1 (id 3) tokens inside the base's embedding rows, which the base's tokenizer lacks"]
    lacks = differences(base, _vocab({0: "<s>", 1: "a"}, eos_token="a", special=frozenset({0})), 3, "s")
    assert lacks == [
        "lacks 1 (id 2) of the base's tokens",
        "eos_token 'a' (base '<s>')",
        "the special flag of 1 (id 0) tokens",
    ]
    with pytest.raises(DotsError, match=r"s's tokenizer \(t\) gives id 2 to 'c', the base's \(t\) to 'b'; 1 ids"):
        differences(base, _vocab({0: "<s>", 1: "a", 2: "c"}), 3, "s")
    # an id past the base's rows is the extra vocabulary align takes whole from one source
    assert differences(base, _vocab({0: "<s>", 1: "a", 2: "b", 3: "x"}, eos_token="<s>"), 3, "s") == []


def _grown(src: Path, out: Path, rows: list[int], tokens: list[str]) -> Path:
    """`src` with tokens added (tests/test_extra_vocab.py's `grow`), its tokenizer.json saved by the
    tokenizers library as a trainer would (transformers' save rewrites the tiny models' rules)."""
    from test_extra_vocab import grow
    from tokenizers import Tokenizer

    grow(src, out, rows)
    tokenizer = Tokenizer.from_file(str(src / "tokenizer.json"))
    tokenizer.add_tokens(tokens)
    tokenizer.save(str(out / "tokenizer.json"))
    shutil.copy(src / "tokenizer_config.json", out / "tokenizer_config.json")
    return out


def test_sources_adding_tokens_warn_only_when_the_output_drops_some(checkpoints, tmp_path):
    from test_extra_vocab import ADDED

    from dots.io.align import align
    from dots.io.inputs import check_sources_differ

    family = checkpoints(sft_plain={"seed": 1, "scale": 0.02}, rlvr={"seed": 2, "scale": 0.01, "density": 0.3})
    base = Checkpoint(family.base)
    grown = _grown(family.sources["sft_plain"], tmp_path / "sft", [1, 2, 3], ADDED)
    sources = {"sft": Checkpoint(grown), "rlvr": Checkpoint(family.sources["rlvr"])}
    assert check_sources_differ(align(base, sources)) == []  # the extra vocabulary: no tokenizer warning
    # as many added tokens, two in another order: the output keeps sft's, not these
    other = _grown(family.sources["rlvr"], tmp_path / "rlvr", [4, 5, 6], [ADDED[1], ADDED[0], ADDED[2]])
    (line,) = check_sources_differ(align(base, {"sft": Checkpoint(grown), "rlvr": Checkpoint(other)}))
    assert re.match(r"source rlvr's tokenizer .* the output does not keep its 2 \(ids 100\.\.101\) tokens", line)


def test_hidden_files_are_not_weights(inputs, tmp_path):
    """A macOS resource fork (`._model.safetensors`) beside the weights is not read as a second weight
    file; a visible copy of the weights is two files defining every tensor."""
    model = Path(shutil.copytree(inputs["sft"], tmp_path / "sft"))
    (model / "._model.safetensors").write_bytes(b"\x00\x05\x16\x07" + bytes(4092))
    assert sorted(Checkpoint(model).names) == sorted(Checkpoint(inputs["sft"]).names)
    shutil.copy(model / "model.safetensors", model / "model copy.safetensors")
    with pytest.raises(DotsError, match="defined in two weight files, model copy.safetensors and model.safetensors"):
        Checkpoint(model)
