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

from dots.errors import DotsError

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
    data_end = 0
    try:
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype = TORCH_DTYPES.get(entry["dtype"])
            if dtype is None:
                raise DotsError(f"{file}: unsupported dtype {entry['dtype']} for {name}")
            start, end = entry["data_offsets"]
            out[name] = (TensorInfo(tuple(entry["shape"]), dtype), 8 + size + start, end - start)
            data_end = max(data_end, end)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise DotsError(f"cannot read safetensors file {file}: malformed header ({exc})") from None
    actual = file.stat().st_size
    if actual < 8 + size + data_end:  # a cut download or copy: found now, not mid-merge
        raise DotsError(f"{file} is truncated: {actual} bytes, its header describes {8 + size + data_end}")
    return out
