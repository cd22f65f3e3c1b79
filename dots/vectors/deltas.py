"""τ_i = θ_i − θ0 in float32: the one place dots reads task vectors from checkpoints.

Every consumer — the merge executor, the τ̃ cache, the analysis — streams through
`read_inputs`: θ0 and each source's τ for one merged tensor or a range of its rows (the
base's rows only: vocabulary rows a source added are not differences). A tensor larger
than `BLOCK_ENTRIES` comes as row blocks (`row_blocks`), so peak memory stays a few
blocks whatever the model's width. A NaN or ±Inf in a source stops with a DotsError.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from dots.errors import DotsError

if TYPE_CHECKING:
    from dots.io.align import Alignment

__all__ = ["BLOCK_ENTRIES", "all_finite", "block_stream", "read_inputs", "row_blocks", "tensor_stream"]

BLOCK_ENTRIES = 1 << 24  # a tensor larger than this is read in row blocks of about this many entries


def all_finite(tensor: torch.Tensor) -> bool:
    """True when no entry is NaN or ±Inf. A finite sum proves it (any NaN/Inf makes the sum
    NaN/Inf) at the cost of one vectorised reduction; only a non-finite sum — a bad entry,
    or an overflow of huge finite ones — pays for the exact elementwise check."""
    if not tensor.is_floating_point():
        return True
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def row_blocks(shape: Sequence[int], block_entries: int = BLOCK_ENTRIES) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) covering a tensor, each about `block_entries` entries; one range
    (the whole tensor) when it is not larger than that or has no rows."""
    if not shape or math.prod(shape) <= block_entries:
        return [(0, shape[0] if shape else 0)]
    per_row = math.prod(shape[1:])
    step = max(1, block_entries // per_row)
    return [(r, min(r + step, shape[0])) for r in range(0, shape[0], step)]


def read_inputs(
    alignment: Alignment,
    name: str,
    with_deltas: bool = True,
    rows: tuple[int, int] | None = None,
    sources: Sequence[str] | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """θ0 (float32) and τ_i = θ_i − θ0 (float32) of one merged tensor, or of its rows
    [r0, r1), for every source (or those named in `sources`, in that order)."""
    info = alignment.base.info(name)
    span = rows if rows is not None else (0, info.shape[0] if info.shape else 1)
    base = alignment.base.get_rows(name, *span).to(torch.float32)
    deltas: list[torch.Tensor] = []
    if with_deltas:
        if not all_finite(base):
            raise DotsError(f"the base ({alignment.base.source}) has NaN/Inf values in {name}")
        for key in sources if sources is not None else alignment.sources:
            ckpt = alignment.sources[key]
            theta = ckpt.get_rows(alignment.source_name(key, name), *span)
            if not all_finite(theta):
                raise DotsError(f"source {key} ({ckpt.source}) has NaN/Inf values in {name}")
            tau = theta if theta.dtype == torch.float32 else theta.to(torch.float32)
            del theta
            deltas.append(tau.sub_(base))
    return base, deltas


def task_vector(alignment: Alignment, key: str, name: str, block_entries: int | None = None) -> torch.Tensor:
    """τ of source `key` for the whole tensor `name` (float32, the base's rows). A tensor above
    `block_entries` (default BLOCK_ENTRIES) is filled row block by row block, so reading it
    holds τ and two blocks, not θ0 and θ_i whole beside τ (2.5 float32 copies: 5 GiB for a
    152064×3584 embedding)."""
    spans = row_blocks(alignment.base.info(name).shape, block_entries or BLOCK_ENTRIES)
    if len(spans) == 1:
        return read_inputs(alignment, name, sources=[key])[1][0]
    tau = torch.empty(alignment.base.info(name).shape, dtype=torch.float32)
    for r0, r1 in spans:
        tau[r0:r1] = read_inputs(alignment, name, sources=[key], rows=(r0, r1))[1][0]
    return tau


def tensor_stream(
    alignment: Alignment, names: Sequence[str], with_deltas: bool = True, block_entries: int = BLOCK_ENTRIES
) -> Iterator[tuple[str, torch.Tensor, list[torch.Tensor]]]:
    """(name, θ0, [τ_i]) per merged tensor, a large tensor as consecutive row blocks."""
    for name in names:
        for span in row_blocks(alignment.base.info(name).shape, block_entries):
            yield (name, *read_inputs(alignment, name, with_deltas, span))


def block_stream(
    alignment: Alignment, name: str, spans: Sequence[tuple[int, int]], with_deltas: bool = True
) -> Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]]:
    """A fresh pass over one tensor's row blocks: (flat offset, θ0 rows, [τ_i rows])."""
    per_row = math.prod(alignment.base.info(name).shape[1:])
    for span in spans:
        yield (span[0] * per_row, *read_inputs(alignment, name, with_deltas, span))
