"""The safetensors format, read by hand: dtype codes, tensor metadata, header parsing.

Parsing the JSON header ourselves gives every tensor's byte range without mapping the
file, so a reader can fetch one tensor (or some of its rows) with plain reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from dots.errors import DotsError, first_line

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
    [start, end] with end - start = numel × dtype size}, all within the file."""
    try:
        actual = file.stat().st_size
        with open(file, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if size <= 0 or size > min(100 * 2**20, actual - 8):
                raise ValueError(f"implausible header size {size}")
            header = json.loads(fh.read(size).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DotsError(f"cannot read safetensors file {file}: {first_line(exc)}") from None
    if not isinstance(header, dict):
        raise DotsError(f"cannot read safetensors file {file}: its header is not a JSON object")
    out: dict[str, tuple[TensorInfo, int, int]] = {}
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise DotsError(f"{file}: __metadata__ must map names to texts")
            continue
        info, start, end = _entry(entry, f"{file}: tensor {name!r}")
        out[name] = (info, 8 + size + start, end - start)
        data_end = max(data_end, end)
    if actual < 8 + size + data_end:  # a cut download or copy: found now, not mid-merge
        raise DotsError(f"{file} is truncated: {actual} bytes, its header describes {8 + size + data_end}")
    return out


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
