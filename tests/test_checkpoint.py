"""Lazy reader and atomic planned writer on real safetensors files."""

import json
import logging
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.convert import convert_bin_to_safetensors
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter
from dots.vectors.deltas import all_finite


@pytest.fixture(scope="module")
def sharded(checkpoints):
    return checkpoints({"dtype": torch.bfloat16, "max_shard_size": "20KB"}).base


def test_reader_sees_every_shard_lazily(sharded):
    assert (sharded / "model.safetensors.index.json").exists()
    ckpt = Checkpoint(sharded)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(ckpt.names) == set(index)
    name = "model.embed_tokens.weight"
    assert ckpt.info(name).dtype == torch.bfloat16
    assert tuple(ckpt.get(name).shape) == ckpt.info(name).shape
    assert ckpt.architecture == "Qwen2ForCausalLM"
    assert {"config.json", "tokenizer.json"} <= {p.name for p in ckpt.aux_files()}


def test_writer_roundtrip_any_order_and_shards(tmp_path):
    tensors = {f"t{i}": torch.randn(50, 10 + i) for i in range(7)}
    tensors["ints"] = torch.arange(12, dtype=torch.int64)
    plan = {k: TensorInfo(tuple(v.shape), torch.bfloat16 if k != "ints" else torch.int64) for k, v in tensors.items()}
    with CheckpointWriter(tmp_path / "out", plan, max_shard_bytes=3000) as w:
        for k in reversed(list(tensors)):  # order must not matter
            w.write(k, tensors[k])
        out = w.commit()
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    back = Checkpoint(out)
    for k, v in tensors.items():
        assert torch.equal(back.get(k), v.to(plan[k].dtype))
    # files are valid for the reference loader too
    for f in set(index["weight_map"].values()):
        load_file(out / f)
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_writer_leaves_nothing_on_error(tmp_path):
    plan = {"a": TensorInfo((2, 2), torch.float32), "b": TensorInfo((3,), torch.float32)}
    with pytest.raises(RuntimeError):
        with CheckpointWriter(tmp_path / "out", plan) as w:
            w.write("a", torch.ones(2, 2))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    w = CheckpointWriter(tmp_path / "out", plan)
    w.write("a", torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="never written"):
        w.commit()
    assert list(tmp_path.iterdir()) == []


def test_writer_background_write_error_reaches_the_caller(tmp_path):
    """Bytes are written from a background thread; a failing write (here: the file-size limit
    makes the kernel refuse writes past 1 MiB) must still raise — one DotsError line naming the
    output and the reason — and leave nothing behind."""
    import resource

    plan = {f"t{i}": TensorInfo((512, 1024), torch.float32) for i in range(4)}  # 2 MiB each
    w = CheckpointWriter(tmp_path / "out", plan)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        with pytest.raises(DotsError, match=r"cannot write .*out: File too large"):
            with w:
                for name in plan:
                    w.write(name, torch.ones(512, 1024))
                w.commit()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert list(tmp_path.iterdir()) == []


def test_writer_rows_in_any_order(tmp_path):
    """write_rows puts row blocks at their offsets (any order, across shards); a tensor missing
    a block is never written, and a block that does not fit is refused."""
    big = torch.arange(40 * 3, dtype=torch.float32).reshape(40, 3)
    small = torch.ones(5, dtype=torch.bfloat16)
    plan = {"big": TensorInfo((40, 3), torch.bfloat16), "small": TensorInfo((5,), torch.bfloat16)}
    with CheckpointWriter(tmp_path / "out", plan, max_shard_bytes=100) as writer:
        for r0 in (30, 0, 10, 20):
            writer.write_rows("big", r0, big[r0 : r0 + 10])
        writer.write_rows("small", 0, small)
        with pytest.raises(ValueError):
            writer.write_rows("big", 35, big[:10])
        out = writer.commit()
    state = {}
    for file in out.glob("*.safetensors"):
        state.update(load_file(str(file)))
    assert torch.equal(state["big"], big.to(torch.bfloat16)) and torch.equal(state["small"], small)
    with pytest.raises(RuntimeError, match="never written"):
        with CheckpointWriter(tmp_path / "partial", plan) as writer:
            writer.write_rows("big", 0, big[:39])
            writer.write("small", small)
            writer.commit()
    assert not (tmp_path / "partial").exists()


def test_writer_replaces_only_its_own_output(tmp_path):
    """An empty directory takes the output; a previous one is replaced only with overwrite=true,
    and never when a file dots did not write is in it (`dots.io.destination`)."""
    plan = {"a": TensorInfo((1,), torch.float32)}
    (tmp_path / "out").mkdir()
    with CheckpointWriter(tmp_path / "out", plan) as w:
        w.write("a", torch.zeros(1))
        w.commit()
    with pytest.raises(DotsError, match="overwrite=true"):
        CheckpointWriter(tmp_path / "out", plan)
    with CheckpointWriter(tmp_path / "out", plan, overwrite=True) as w:
        w.write("a", torch.ones(1))
        w.commit()
    assert torch.equal(Checkpoint(tmp_path / "out").get("a"), torch.ones(1))
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(DotsError, match="notes.txt"):
        CheckpointWriter(tmp_path / "out", plan, overwrite=True)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(DotsError, match="does not exist"):
        Checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DotsError, match="not a model directory"):
        Checkpoint(tmp_path / "empty")


def test_bin_checkpoint_is_converted(tmp_path, sharded):
    src = tmp_path / "bin"
    src.mkdir()
    ckpt = Checkpoint(sharded)
    torch.save(dict(ckpt.tensors()), src / "pytorch_model.bin")
    (src / "config.json").write_text((sharded / "config.json").read_text())
    with pytest.raises(DotsError, match="convert"):
        Checkpoint(src)
    out = convert_bin_to_safetensors(src, tmp_path / "st")
    conv = Checkpoint(out)
    assert conv.names and all(torch.equal(conv.get(n), ckpt.get(n)) for n in ckpt.names)


def test_hub_id_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(DotsError, match="Hub cache"):
        Checkpoint("nobody/no-such-model")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_finite(dtype):
    x = torch.linspace(-1, 1, 1001).to(dtype)
    assert all_finite(x)
    huge = torch.full((8,), torch.finfo(dtype).max, dtype=dtype)
    assert all_finite(huge)  # the sum overflows; the exact check still says finite
    for bad in (float("nan"), float("inf"), float("-inf")):
        y = x.clone()
        y[500] = bad
        assert not all_finite(y)
    assert all_finite(torch.arange(5))  # integers cannot hold NaN


def test_json_lines_reads_utf8_and_keeps_a_line_of_bad_bytes_as_none(tmp_path):
    """dots.io.jsonl: a row cut by a kill can end inside a multi-byte character."""
    from dots.io.jsonl import json_lines

    path = tmp_path / "rows.jsonl"
    path.write_bytes('{"a": "é"}\n'.encode() + b'{"b": "\xc3\n{"c": 1}\n')
    assert json_lines(path) == [{"a": "é"}, None, {"c": 1}]
    assert json_lines(tmp_path / "missing.jsonl") == []


def test_a_tensor_in_two_weight_files_is_refused_in_one_line_naming_both(tmp_path):
    """Which copy a loader reads depends on its file order: neither is taken, and the line says
    what the index says of it (listed where, or not) or that there is no index."""
    from safetensors.torch import save_file

    def model(name: str, files: dict[str, list[str]], index: dict[str, str] | None) -> Checkpoint:
        path = tmp_path / name
        path.mkdir()
        for file, names in files.items():
            save_file({n: torch.ones(2) for n in names}, str(path / file))
        if index is not None:
            (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
        return path

    bare = model("bare", {"a.safetensors": ["w"], "b.safetensors": ["w"]}, None)
    with pytest.raises(DotsError) as e:
        Checkpoint(bare).names()
    assert str(e.value) == (
        f"{bare}: tensor 'w' is defined in two weight files, a.safetensors and b.safetensors, and no "
        "model.safetensors.index.json says which to read: remove the file that does not belong"
    )
    files = {"a.safetensors": ["w", "x"], "b.safetensors": ["w", "v"]}
    for listed, where in (({"w": "a.safetensors"}, "is listed in a.safetensors"), ({}, "is not listed")):
        indexed = model(f"indexed{len(listed)}", files, {"x": "a.safetensors", "v": "b.safetensors", **listed})
        with pytest.raises(DotsError) as e:
            Checkpoint(indexed).names()
        assert str(e.value) == (
            f"{indexed / 'model.safetensors.index.json'}: tensor 'w' {where}, but both a.safetensors and "
            "b.safetensors hold it: remove it from the shard the index does not name"
        )


def test_a_full_disk_is_said_so_and_another_disk_error_is_not(tmp_path):
    """dots.io.writer.disk_write_error (the real full disk: tests/test_full_disk.py, outside the
    mutation selection: it needs a small filesystem mounted)."""
    import errno

    from dots.io.writer import disk_write_error

    for code in (errno.ENOSPC, errno.EDQUOT):
        said = str(disk_write_error(tmp_path, OSError(code, "No space left on device")))
        full = "(no space left on the device: nothing was kept)"
        assert said == f"cannot write {tmp_path}: No space left on device {full}"
    assert str(disk_write_error(tmp_path, OSError(errno.EROFS, "Read-only file system"))) == (
        f"cannot write {tmp_path}: Read-only file system"
    )


class _NotATensor:  # a global that torch's weights_only unpickler refuses
    pass


def _mapped(path) -> bool:
    """Whether this process maps `path` (Linux: /proc/self/maps names every mapped file)."""
    return str(path) in Path("/proc/self/maps").read_text()


def test_a_bin_shard_is_read_mapped_or_whole(tmp_path, caplog):
    """dots.io.convert.load_bin in process (the CLI's conversion: tests/test_input_formats.py): a
    zip archive is mapped, the legacy format read whole with one info line; both give the tensors."""
    from dots.io.convert import load_bin

    tensors = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3, dtype=torch.bfloat16)}
    torch.save(tensors, tmp_path / "zip.bin")
    torch.save(tensors, tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    for name, mapped in (("zip.bin", True), ("legacy.bin", False)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="dots.io.convert"):
            state = load_bin(tmp_path / name)
        assert set(state) == {"w", "b"} and all(torch.equal(state[k], tensors[k]) for k in tensors)
        assert all(t.device.type == "cpu" for t in state.values())
        assert _mapped(tmp_path / name) is mapped
        legacy = [f"{tmp_path / name} is in PyTorch's legacy (pre-1.6) format: read whole, it cannot be mapped"]
        assert [r.getMessage() for r in caplog.records] == ([] if mapped else legacy)
        del state


def test_a_bin_shard_saved_from_a_gpu_is_read_onto_the_cpu(tmp_path):
    """A checkpoint whose storages are tagged cuda:0 (saved from a GPU: a tagger registered with
    torch.serialization marks them so here) loads onto the CPU; without map_location torch would
    restore them to a CUDA device this machine does not have."""
    from dots.io.convert import load_bin

    saving = [True]
    torch.serialization.register_package(-1, lambda s: "cuda:0" if saving[0] else None, lambda s, loc: None)
    try:
        torch.save({"w": torch.arange(3.0)}, tmp_path / "gpu.bin")
    finally:
        saving[0] = False
    state = load_bin(tmp_path / "gpu.bin")
    assert state["w"].device.type == "cpu" and torch.equal(state["w"], torch.arange(3.0))


def test_each_bad_bin_shard_is_one_line(tmp_path):
    """A pickle torch refuses names the global or torch's own reason; a file that is no checkpoint
    gives torch's first line; a checkpoint that is no mapping of names to tensors is refused."""
    from dots.io.convert import load_bin

    def refused(path, what: str) -> str:
        return (
            f"{path}: torch refuses to load its pickle with weights_only=True ({what}, which a file of tensors "
            "does not need); dots runs no code from a pickle: load it with torch.load(weights_only=False) only "
            "if you trust its origin, and save its tensors"
        )

    torch.save({"w": _NotATensor()}, tmp_path / "pickle.bin")
    with pytest.raises(DotsError) as e:
        load_bin(tmp_path / "pickle.bin")
    assert str(e.value) == refused(tmp_path / "pickle.bin", "it names test_checkpoint._NotATensor")
    (tmp_path / "opcode.bin").write_bytes(b"\x80\x02(i__main__\nX\n.")  # INST: an opcode the unpickler refuses
    with pytest.raises(DotsError) as e:
        load_bin(tmp_path / "opcode.bin")
    assert str(e.value) == refused(tmp_path / "opcode.bin", "Unsupported operand 105")
    for junk, says in (
        (b"not a checkpoint\n" * 4, "neither a zip archive nor a pickle"),
        (b"PK\x03\x04 not a zip archive", "neither a zip archive nor a pickle"),
        (b"\x80\x02", "EOFError"),  # a pickle cut short: torch's error has no message, so its type
    ):
        (tmp_path / "junk.bin").write_bytes(junk)
        with pytest.raises(DotsError) as e:
            load_bin(tmp_path / "junk.bin")
        assert str(e.value) == f"cannot read {tmp_path / 'junk.bin'} as a PyTorch checkpoint: {says}"
    with zipfile.ZipFile(tmp_path / "other.bin", "w") as archive:  # a zip archive, not a checkpoint
        archive.writestr("notes.txt", "hello")
    with pytest.raises(Exception) as torch_says:
        torch.load(tmp_path / "other.bin", map_location="cpu", weights_only=True)
    with pytest.raises(DotsError) as e:
        load_bin(tmp_path / "other.bin")
    first = str(torch_says.value).strip().splitlines()[0]
    assert str(e.value) == f"cannot read {tmp_path / 'other.bin'} as a PyTorch checkpoint: {first[:300]}"
    torch.save([torch.ones(2)], tmp_path / "list.bin")
    with pytest.raises(DotsError) as e:
        load_bin(tmp_path / "list.bin")
    assert str(e.value) == f"{tmp_path / 'list.bin'} holds a list, not a mapping of tensor names to tensors"
    long = "k" * 90
    for state, entry in (
        ({"w": torch.ones(2), "step": 3}, "'step' is a int"),
        ({long: 1.5}, f"{long[:80]!r} is a float"),
        ({"w": torch.ones(2), 7: torch.ones(2)}, "'7' is a Tensor"),
    ):
        torch.save(state, tmp_path / "training.bin")
        with pytest.raises(DotsError) as e:
            load_bin(tmp_path / "training.bin")
        assert str(e.value) == (
            f"{tmp_path / 'training.bin'}: entry {entry}, not a tensor (a training checkpoint? save the model's "
            "state_dict alone)"
        )


@pytest.mark.parametrize(
    ("value", "off"),
    [("1", True), (" on ", True), ("yes", True), ("True", True), ("0", False), ("", False), ("no", False)],
)
def test_hf_hub_offline_is_read_as_huggingface_hub_reads_it(monkeypatch, value, off):
    from dots.io.checkpoint import offline

    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert offline() is off
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert offline() is False
