"""The safetensors format, read and written by hand: dtype codes, tensor metadata, header
parsing, header bytes, and the two ways dots writes a file.

Parsing the JSON header ourselves gives every tensor's byte range without mapping the
file, so a reader can fetch one tensor (or some of its rows) with plain reads. Writing:
`lay_out` makes a file with its header at its final size, so tensors go to their offsets
in any order (`dots.io.writer.CheckpointWriter`); `write_file` writes tensors at hand in
one pass (the Fisher cache); `AppendedFile` appends tensors whose sizes are known only
as they come and writes the header last (the τ̃ cache). Each tensor's bytes are written
straight from its memory (`safetensors.torch.save_file` first builds a copy of them all).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from dots.errors import DotsError, first_line

__all__ = ["AppendedFile", "TensorInfo", "check_data_digest", "data_digest", "dtype_size", "write_file"]

ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        ST_DTYPES[getattr(torch, _name)] = _code
TORCH_DTYPES = {v: k for k, v in ST_DTYPES.items()}


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


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


def read_safetensors_header(file: Path) -> dict[str, tuple[TensorInfo, int, int]]:
    """Parse a safetensors header: name -> (TensorInfo, absolute byte offset, nbytes).

    Checked field by field (a one-line DotsError naming the file and the tensor): the header
    is a JSON object of entries {dtype: a known code, shape: integers >= 0, data_offsets:
    [start, end] with end - start = numel × dtype size}, each name once, and the spans tile the
    data section as the safetensors library requires (`_check_spans`), which ends the file."""
    try:
        actual = file.stat().st_size
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if size <= 0 or size > min(100 * 2**20, actual - 8):
                raise ValueError(f"implausible header size {size}")
            header = json.loads(fh.read(size).decode("utf-8"), object_pairs_hook=_once)
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DotsError(f"cannot read safetensors file {file}: {first_line(exc)}") from None
    if not isinstance(header, dict):
        raise DotsError(f"cannot read safetensors file {file}: its header is not a JSON object")
    out: dict[str, tuple[TensorInfo, int, int]] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise DotsError(f"{file}: __metadata__ must map names to texts")
            continue
        info, start, end = _entry(entry, f"{file}: tensor {name!r}")
        out[name] = (info, 8 + size + start, end - start)
        spans.append((start, end, name))
    data_end = _check_spans(file, spans)
    if actual < 8 + size + data_end:  # a cut download or copy: found now, not mid-merge
        raise DotsError(f"{file} is truncated: {actual} bytes, its header describes {8 + size + data_end}")
    if actual > 8 + size + data_end:
        raise DotsError(
            f"{file}: {actual - 8 - size - data_end} bytes follow the last tensor's data (the file has {actual} "
            f"bytes, its header describes {8 + size + data_end}); the safetensors library refuses such a file"
        )
    return out


def _once(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are distinct (json.loads would keep the last of two, silently)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{key!r} appears twice in one JSON object")
        out[key] = value
    return out


def _check_spans(file: Path, spans: list[tuple[int, int, str]]) -> int:
    """The tensors' byte spans (relative to the data section, so none reaches into the header)
    tile the data from its first byte, without overlap or gap, as the safetensors library requires
    of every file it opens; the data section's size. Two tensors sharing bytes would be read as
    one; a gap holds bytes no tensor owns. An overlap is named first: it leaves a gap elsewhere."""
    ordered = sorted(spans)
    reach, owner = 0, ""
    for start, end, name in ordered:
        if start < reach and end > start:
            raise DotsError(
                f"{file}: tensors {owner!r} and {name!r} overlap (bytes {start}..{min(end, reach)} of the data "
                "section belong to both): the header points two tensors at the same bytes"
            )
        if end > reach:
            reach, owner = end, name
    position, owner = 0, ""
    for start, end, name in ordered:
        if start != position:
            where = f"inside {owner!r}" if start < position else f"after a gap of bytes {position}..{start}"
            raise DotsError(
                f"{file}: tensor {name!r} starts at byte {start} of the data section, {where}; the safetensors "
                "library refuses a file whose tensors do not follow each other without gaps"
            )
        if end > start:
            position, owner = end, name
    return position


def _entry(entry: object, where: str) -> tuple[TensorInfo, int, int]:
    """One header entry checked: (TensorInfo, start, end) of its bytes after the header."""

    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not isinstance(entry, dict):
        raise DotsError(f"{where}: its entry is not a JSON object")
    code = entry.get("dtype")
    dtype = TORCH_DTYPES.get(code) if isinstance(code, str) else None
    if dtype is None:
        raise DotsError(f"{where}: unsupported dtype {entry.get('dtype')!r}")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(whole(n) for n in shape):
        raise DotsError(f"{where}: shape must be a list of integers >= 0, got {str(shape)[:80]}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(whole(n) for n in offsets):
        raise DotsError(f"{where}: data_offsets must be [start, end], got {str(offsets)[:80]}")
    info = TensorInfo(tuple(shape), dtype)
    start, end = offsets
    if end - start != info.nbytes:
        raise DotsError(
            f"{where}: data_offsets {offsets} hold {end - start} bytes, its shape and dtype need {info.nbytes}"
        )
    return info, start, end


def tensor_bytes(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The bytes of `tensor` (cast to `dtype`, on the CPU, in C order) as a flat uint8 view."""
    return tensor.detach().to("cpu", dtype or tensor.dtype).contiguous().reshape(-1).view(torch.uint8)


def header_bytes(
    names: list[str], plan: Mapping[str, TensorInfo], metadata: Mapping[str, str]
) -> tuple[bytes, dict[str, int]]:
    """The JSON header of a file holding `names` in that order (padded with spaces to 8
    bytes, as safetensors does) and each tensor's offset in the data section."""
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offsets: dict[str, int] = {}
    start = 0
    for name in names:
        info = plan[name]
        header[name] = {
            "dtype": ST_DTYPES[info.dtype],
            "shape": list(info.shape),
            "data_offsets": [start, start + info.nbytes],
        }
        offsets[name] = start
        start += info.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header with spaces to 8 bytes
    return raw, offsets


def lay_out(
    path: Path, names: list[str], plan: Mapping[str, TensorInfo], metadata: Mapping[str, str]
) -> dict[str, int]:
    """Create `path` with its header, at its final size (sparse until written); each tensor's
    absolute byte offset in the file."""
    header, offsets = header_bytes(names, plan, metadata)
    with open(path, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little"))
        fh.write(header)
        fh.truncate(8 + len(header) + sum(plan[x].nbytes for x in names))
    return {name: 8 + len(header) + offsets[name] for name in names}


def write_file(tensors: Mapping[str, torch.Tensor], path: Path, metadata: Mapping[str, str]) -> None:
    """One safetensors file of `tensors`, in their order, in one pass."""
    plan = {name: TensorInfo(tuple(t.shape), t.dtype) for name, t in tensors.items()}
    header, _ = header_bytes(list(plan), plan, metadata)
    with open(path, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little"))
        fh.write(header)
        for tensor in tensors.values():
            fh.write(tensor_bytes(tensor).numpy().data)


class AppendedFile:
    """One safetensors file written front to back with bounded memory: the room for the
    header is reserved first (the names are known, the sizes of the compact tensors are
    not until each is encoded), tensors are appended as they come, and the header is
    written last, padded with spaces as the format allows."""

    def __init__(self, path: Path, names: list[str]):
        self.room = sum(len(json.dumps(n)) + 96 for n in names) + 64  # an entry's JSON: its name + ≤ 88
        self.room += -self.room % 8
        self.fh = open(path, "wb")
        self.fh.write(bytes(8 + self.room))
        self.header: dict[str, dict] = {}
        self.offset = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Append `tensor` under `name`."""
        data = tensor_bytes(tensor)
        self.fh.write(memoryview(data.numpy()))  # type: ignore[arg-type]
        end = self.offset + data.numel()
        entry = {"dtype": ST_DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [self.offset, end]}
        self.header[name] = entry
        self.offset = end

    def __enter__(self) -> AppendedFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.fh.close()  # the caller removes the unfinished file

    def close(self) -> None:
        """Write the header into its room and close the file."""
        raw = json.dumps({"__metadata__": {"format": "pt"}, **self.header}, separators=(",", ":")).encode()
        if len(raw) > self.room:
            raise DotsError(f"internal: safetensors header of {len(raw)} bytes exceeds its reserved {self.room}")
        self.fh.seek(0)
        self.fh.write(self.room.to_bytes(8, "little"))
        self.fh.write(raw + b" " * (self.room - len(raw)))
        self.fh.close()


def data_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """The SHA-256 of the data section `write_file` writes for `tensors` (kept in the file's own
    metadata, so that a reader can tell a scrambled file from the one written: `check_data_digest`)."""
    h = hashlib.sha256()
    for tensor in tensors.values():
        h.update(tensor_bytes(tensor).numpy().data)
    return "sha256:" + h.hexdigest()


def check_data_digest(path: Path) -> None:
    """A DotsError when `path`'s data section does not hash to the digest its metadata holds
    (files without one — written by an older dots — are not checked)."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        known = json.loads(fh.read(size)).get("__metadata__", {}).get("sha256")
        if known is None:
            return
        h = hashlib.sha256()
        while block := fh.read(16 << 20):
            h.update(block)
    if "sha256:" + h.hexdigest() != known:
        raise DotsError(f"{path}: its bytes do not match their digest")
