"""Lazy checkpoint reader and streaming, atomic safetensors writer.

`Checkpoint` opens a local model directory or a Hub repo id and reads one tensor at a
time (safetensors mmap), so nothing forces a whole model into memory.
`CheckpointWriter` lays out every shard from a plan of (name, shape, dtype) before any
data arrives, so each tensor is written straight to its final offset and freed: no
buffering, any write order. It writes into a temporary sibling directory and renames it
into place only when every planned tensor has been written.
"""
from __future__ import annotations

import json
import logging
import math
import os
import queue
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import torch

from dots.errors import DotsError

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".gguf")
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# Files written by dots itself; never copied from a source into an output.
OWN_FILES = ("README.md",)

_ST_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        _ST_DTYPES[getattr(torch, _name)] = _code
_TORCH_DTYPES = {v: k for k, v in _ST_DTYPES.items()}


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def all_finite(tensor: torch.Tensor) -> bool:
    """True when no entry is NaN or ±Inf. A finite sum proves it (any NaN/Inf makes the sum
    NaN/Inf) at the cost of one vectorised reduction; only a non-finite sum — a bad entry,
    or an overflow of huge finite ones — pays for the exact elementwise check."""
    if not tensor.is_floating_point():
        return True
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def resolve_model_dir(path_or_id: str | os.PathLike, revision: str | None = None) -> Path:
    """Return a local directory for a model path or a Hub repo id.

    A Hub id is fetched with `huggingface_hub.snapshot_download` (weights, configs and
    tokenizer files only), which honours HF_HUB_OFFLINE and the local cache.
    """
    text = str(path_or_id)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise DotsError(f"not a model directory (a file): {text}")
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") != 1 or os.sep in text.replace("/", "")
    if looks_like_path:
        raise DotsError(f"model path does not exist: {text}")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        local = snapshot_download(
            repo_id=text,
            revision=revision,
            allow_patterns=["*.safetensors", "*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken", "*.py"],
        )
    except LocalEntryNotFoundError:
        raise DotsError(
            f"model {text!r} is neither a local directory nor in the Hub cache"
            + (" (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else " and could not be downloaded")
        ) from None
    except (HfHubHTTPError, ValueError, OSError) as exc:
        raise DotsError(f"cannot fetch {text!r} from the Hub: {str(exc).splitlines()[0]}") from None
    return Path(local)


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_size(self.dtype)


class Checkpoint:
    """A model directory read lazily: names, shapes, dtypes, one tensor at a time, config."""

    def __init__(self, path_or_id: str | os.PathLike, revision: str | None = None):
        self.source = str(path_or_id)
        self.path = resolve_model_dir(path_or_id, revision)
        self._files = self._weight_files()
        self._where: dict[str, tuple[Path, int, int]] = {}  # name -> (file, byte offset, nbytes)
        self._info: dict[str, TensorInfo] = {}
        for file in self._files:
            for name, (info, offset, nbytes) in read_safetensors_header(file).items():
                self._where[name] = (file, offset, nbytes)
                self._info[name] = info

    def _weight_files(self) -> list[Path]:
        index = self.path / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted({self.path / f for f in weight_map.values()})
            missing = [f.name for f in files if not f.exists()]
            if missing:
                raise DotsError(f"{self.path}: index names missing shard(s) {', '.join(missing[:3])}")
            return files
        files = sorted(self.path.glob("*.safetensors"))
        if files:
            return files
        if list(self.path.glob("*.bin")) or list(self.path.glob("*.pt")):
            raise DotsError(
                f"{self.path} holds only PyTorch .bin weights; convert it first: "
                f"python -m dots.checkpoint convert {self.path} OUTPUT_DIR"
            )
        raise DotsError(f"not a model directory (no *.safetensors weights): {self.path}")

    # --- metadata -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._info)

    def __contains__(self, name: str) -> bool:
        return name in self._info

    def info(self, name: str) -> TensorInfo:
        return self._info[name]

    @property
    def config(self) -> dict:
        cfg = self.path / "config.json"
        if not cfg.exists():
            raise DotsError(f"{self.path} has no config.json")
        return json.loads(cfg.read_text())

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or [self.config.get("model_type", "?")]
        return str(archs[0])

    @property
    def tie_word_embeddings(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))

    def aux_files(self) -> list[Path]:
        """Config, tokenizer and generation files: everything but weights and indexes."""
        return sorted(
            p for p in self.path.iterdir()
            if p.is_file() and not p.name.endswith(WEIGHT_SUFFIXES)
            and p.name not in INDEX_NAMES and p.name not in OWN_FILES and not p.name.startswith(".")
        )

    @property
    def total_bytes(self) -> int:
        return sum(i.nbytes for i in self._info.values())

    # --- data -----------------------------------------------------------------------------
    def get(self, name: str) -> torch.Tensor:
        """One tensor read into private memory (plain file read, no mmap).

        Reading instead of mapping keeps the process's RSS bounded by the tensors alive,
        whatever the file size, and the result may be modified in place freely.
        """
        info = self.info(name) if name in self._info else None
        if info is None:
            raise KeyError(name)
        return self._read(name, 0, info.shape[0] if info.shape else 1)

    def get_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of a tensor along dim 0, read alone (for streaming in chunks)."""
        info = self._info.get(name)
        if info is None:
            raise KeyError(name)
        if not info.shape:
            return self.get(name)
        start, stop = max(0, start), min(stop, info.shape[0])
        return self._read(name, start, max(start, stop))

    def _read(self, name: str, start: int, stop: int) -> torch.Tensor:
        file, offset, nbytes = self._where[name]
        info = self._info[name]
        rows = info.shape[0] if info.shape else 1
        row_bytes = nbytes // rows if rows else 0
        shape = (stop - start, *info.shape[1:]) if info.shape else ()
        count = (stop - start) * row_bytes
        if count == 0:
            return torch.empty(shape, dtype=info.dtype)
        buf = torch.empty(count, dtype=torch.uint8)  # not zero-filled, unlike a bytearray
        with open(file, "rb", buffering=0) as fh:
            fh.seek(offset + start * row_bytes)
            view = memoryview(buf.numpy())
            got = 0
            while got < count:
                n = fh.readinto(view[got:])
                if not n:
                    raise DotsError(f"{file} is truncated (reading {name})")
                got += n
        return buf.view(info.dtype).reshape(shape)

    def tensors(self, names: Iterable[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for name in names if names is not None else self.names:
            yield name, self.get(name)

    def close(self) -> None:
        """Nothing is held open between reads; kept for symmetry with writers."""

    def __repr__(self) -> str:
        return f"Checkpoint({self.source!r}, {len(self._info)} tensors)"


def open_checkpoints(spec: Mapping[str, str], revisions: Mapping[str, str | None] | None = None) -> dict[str, Checkpoint]:
    revisions = revisions or {}
    return {key: Checkpoint(path, revisions.get(key)) for key, path in spec.items()}


# --- writing ------------------------------------------------------------------------------

def read_safetensors_header(file: Path) -> dict[str, tuple[TensorInfo, int, int]]:
    """Parse a safetensors header: name -> (TensorInfo, absolute byte offset, nbytes)."""
    try:
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if size <= 0 or size > 100 * 2**20:
                raise ValueError(f"implausible header size {size}")
            header = json.loads(fh.read(size))
    except (OSError, ValueError) as exc:
        raise DotsError(f"cannot read safetensors file {file}: {exc}") from None
    out: dict[str, tuple[TensorInfo, int, int]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _TORCH_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise DotsError(f"{file}: unsupported dtype {entry['dtype']} for {name}")
        start, end = entry["data_offsets"]
        out[name] = (TensorInfo(tuple(entry["shape"]), dtype), 8 + size + start, end - start)
    return out


def _shard_plan(plan: Mapping[str, TensorInfo], max_shard_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name, info in plan.items():
        if shards[-1] and size + info.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += info.nbytes
    return shards


def _header(names: list[str], plan: Mapping[str, TensorInfo], metadata: Mapping[str, str]) -> tuple[bytes, dict[str, int]]:
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offsets: dict[str, int] = {}
    start = 0
    for name in names:
        info = plan[name]
        header[name] = {"dtype": _ST_DTYPES[info.dtype], "shape": list(info.shape), "data_offsets": [start, start + info.nbytes]}
        offsets[name] = start
        start += info.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header with spaces to 8 bytes
    return raw, offsets


class CheckpointWriter:
    """Write a planned set of tensors as (sharded) safetensors, atomically.

    `plan` maps every output name to its TensorInfo; shard layout and headers are fixed
    up front, then `write(name, tensor)` puts each tensor at its offset in any order (from
    a background thread, so disk writes overlap the caller's next computation).
    `commit()` checks that everything was written, copies aux files and renames the
    temporary directory onto `out_dir`. On error (or `abort()`), nothing is left behind.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        plan: Mapping[str, TensorInfo],
        max_shard_bytes: int = 5 * 2**30,
        overwrite: bool = False,
        metadata: Mapping[str, str] | None = None,
        weights_name: str = "model",
    ):
        self.out_dir = Path(out_dir).expanduser().resolve()
        if self.out_dir.exists() and not overwrite:
            raise DotsError(f"output exists: {self.out_dir} (pass overwrite=true to replace it)")
        if not plan:
            raise DotsError("nothing to write: the tensor plan is empty")
        self.overwrite = overwrite
        self.plan = dict(plan)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = self.out_dir.parent / f".{self.out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.tmp_dir.mkdir()
        shards = _shard_plan(self.plan, max_shard_bytes)
        n = len(shards)
        self._files: dict[str, tuple[Path, int]] = {}
        self.weight_map: dict[str, str] = {}
        meta = {"format": "pt", **(metadata or {})}
        for i, names in enumerate(shards, 1):
            fname = f"{weights_name}.safetensors" if n == 1 else f"{weights_name}-{i:05d}-of-{n:05d}.safetensors"
            header, offsets = _header(names, self.plan, meta)
            path = self.tmp_dir / fname
            data_bytes = sum(self.plan[x].nbytes for x in names)
            with open(path, "wb") as fh:
                fh.write(len(header).to_bytes(8, "little"))
                fh.write(header)
                fh.truncate(8 + len(header) + data_bytes)
            base = 8 + len(header)
            for name in names:
                self._files[name] = (path, base + offsets[name])
                self.weight_map[name] = fname
        self._open: dict[Path, object] = {}
        self._written: set[str] = set()
        self._rows_written: dict[str, int] = {}
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.index_name = f"{weights_name}.safetensors.index.json" if n > 1 else None

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Queue `tensor` (cast to the planned dtype) for writing at its offset. The bytes go to
        disk from a background thread while the caller computes the next tensor, so `tensor`
        must not be modified until `commit()`; a write error surfaces here or at `commit()`."""
        info = self.plan.get(name)
        if info is None:
            raise KeyError(f"{name} is not in the write plan")
        if tuple(tensor.shape) != info.shape:
            raise ValueError(f"{name}: shape {tuple(tensor.shape)} != planned {info.shape}")
        self._queue_bytes(name, 0, tensor, info)
        self._written.add(name)

    def write_rows(self, name: str, start: int, rows: torch.Tensor) -> None:
        """`write` for rows [start, start + len(rows)) of a tensor: a large tensor goes to disk
        block by block and is never whole in memory. The tensor counts as written once all
        its rows are (blocks must not overlap)."""
        info = self.plan.get(name)
        if info is None:
            raise KeyError(f"{name} is not in the write plan")
        if not info.shape or tuple(rows.shape[1:]) != info.shape[1:] or not 0 <= start <= info.shape[0] - rows.shape[0]:
            raise ValueError(f"{name}: rows {start}..{start + rows.shape[0]} of shape {tuple(rows.shape)} "
                             f"do not fit planned {info.shape}")
        self._queue_bytes(name, start * (info.nbytes // info.shape[0]), rows, info)
        done = self._rows_written[name] = self._rows_written.get(name, 0) + rows.shape[0]
        if done == info.shape[0]:
            self._written.add(name)

    def _queue_bytes(self, name: str, offset: int, tensor: torch.Tensor, info: TensorInfo) -> None:
        data = tensor.detach().to("cpu", info.dtype).contiguous().reshape(-1).view(torch.uint8)
        self._check_background()
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_queued, name="dots-writer", daemon=True)
            self._thread.start()
        self._queue.put((name, offset, data))  # blocks while one item already waits: ≤ 2 in flight

    def _write_queued(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain after a failure; the caller sees the error
            name, offset, data = item
            try:
                path, start = self._files[name]
                fh = self._open.get(path)
                if fh is None:
                    fh = self._open[path] = open(path, "r+b")
                fh.seek(start + offset)  # type: ignore[attr-defined]
                fh.write(memoryview(data.numpy()))  # type: ignore[attr-defined]
            except BaseException as exc:  # noqa: BLE001  re-raised in the caller's thread
                self._error = exc

    def _check_background(self) -> None:
        if self._error is not None:
            raise self._error

    def _finish_background(self) -> None:
        """Wait until every queued tensor is written, close the files."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        for fh in self._open.values():
            fh.close()  # type: ignore[attr-defined]
        self._open.clear()

    def write_all(self, items: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in items:
            self.write(name, tensor)

    def add_file(self, name: str, content: str | bytes) -> None:
        target = self.tmp_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)

    def commit(self, copy_from: Checkpoint | str | os.PathLike | None = None) -> Path:
        """Check completeness, copy aux files from `copy_from`, move into place."""
        self._finish_background()
        if self._error is not None:
            self.abort()
            raise self._error
        missing = [n for n in self.plan if n not in self._written]
        if missing:
            self.abort()
            raise RuntimeError(f"{len(missing)} planned tensors were never written (first: {missing[0]})")
        if copy_from is not None:
            src = copy_from if isinstance(copy_from, Checkpoint) else None
            files = src.aux_files() if src else [p for p in Path(copy_from).iterdir() if p.is_file()]
            for f in files:
                if not (self.tmp_dir / f.name).exists():
                    shutil.copy2(f, self.tmp_dir / f.name)
        if self.index_name:
            total = sum(i.nbytes for i in self.plan.values())
            index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(self.weight_map.items()))}
            (self.tmp_dir / self.index_name).write_text(json.dumps(index, indent=2))
        if self.out_dir.exists():
            trash = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            self.out_dir.rename(trash)
            self.tmp_dir.rename(self.out_dir)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            self.tmp_dir.rename(self.out_dir)
        return self.out_dir

    def abort(self) -> None:
        self._finish_background()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def __enter__(self) -> "CheckpointWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self.tmp_dir.exists():  # left without commit
            self.abort()


def convert_bin_to_safetensors(src: str | os.PathLike, out: str | os.PathLike, overwrite: bool = False) -> Path:
    """Convert a PyTorch .bin checkpoint directory to safetensors, shard by shard."""
    src = Path(src)
    shards = sorted(src.glob("pytorch_model*.bin")) or sorted(src.glob("*.bin"))
    if not shards:
        raise DotsError(f"no .bin weights in {src}")
    plan: dict[str, TensorInfo] = {}
    for shard in shards:  # first pass: shapes only (mmap keeps memory low)
        sd = torch.load(shard, map_location="cpu", mmap=True, weights_only=True)
        plan.update({k: TensorInfo(tuple(v.shape), v.dtype) for k, v in sd.items()})
        del sd
    with CheckpointWriter(out, plan, overwrite=overwrite) as writer:
        for shard in shards:
            sd = torch.load(shard, map_location="cpu", mmap=True, weights_only=True)
            writer.write_all(sd.items())
            del sd
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name not in INDEX_NAMES:
                shutil.copy2(f, writer.tmp_dir / f.name)
        return writer.commit()


def main(argv: list[str] | None = None) -> None:
    import argparse
    from dots.errors import cli_errors

    parser = argparse.ArgumentParser(prog="python -m dots.checkpoint")
    sub = parser.add_subparsers(dest="cmd", required=True)
    conv = sub.add_parser("convert", help="convert a .bin checkpoint directory to safetensors")
    conv.add_argument("src")
    conv.add_argument("out")
    conv.add_argument("--overwrite", action="store_true")
    info = sub.add_parser("info", help="list tensors of a checkpoint")
    info.add_argument("src")
    args = parser.parse_args(argv)

    @cli_errors
    def run() -> None:
        if args.cmd == "convert":
            print(convert_bin_to_safetensors(args.src, args.out, args.overwrite))
        else:
            ckpt = Checkpoint(args.src)
            for name in ckpt.names:
                i = ckpt.info(name)
                print(f"{name}\t{list(i.shape)}\t{str(i.dtype).replace('torch.', '')}")
            print(f"# {len(ckpt.names)} tensors, {ckpt.total_bytes / 2**20:.1f} MiB, {ckpt.architecture}")

    run()


if __name__ == "__main__":
    main()
