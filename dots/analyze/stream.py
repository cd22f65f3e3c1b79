"""τ_i = θ_i − θ0 in float32, one bounded row chunk at a time (docs/method.md §6: streaming).

A chunk is a row range of one tensor holding at most `chunk_entries` entries, so the
largest tensor (an embedding of a 150k vocabulary) never sits whole in memory, and
every chunk is read through a mapping closed right after (`Checkpoint.get_rows`), so
resident memory does not grow with the checkpoint size. Chunks come in the alignment's
tensor order, row by row: the stream order the top-k tie rule refers to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from dots.io.align import Alignment
from dots.runtime.progress import progress_bar
from dots.vectors.deltas import read_inputs


@dataclass(frozen=True)
class Chunk:
    name: str
    start: int
    stop: int
    numel: int


def plan_chunks(al: Alignment, chunk_entries: int) -> list[Chunk]:
    """Row ranges of every merged tensor, each with at most `chunk_entries` entries (one row
    at least)."""
    chunks: list[Chunk] = []
    for name in al.merged:
        shape = al.base.info(name).shape
        if not shape:
            chunks.append(Chunk(name, 0, 1, 1))
            continue
        rows = shape[0]
        row_size = max(1, al.base.info(name).numel // max(rows, 1))
        step = max(1, chunk_entries // row_size)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            chunks.append(Chunk(name, start, stop, (stop - start) * row_size))
    return chunks


def task_vector_chunks(
    al: Alignment, chunks: list[Chunk], description: str
) -> Iterator[tuple[Chunk, dict[str, torch.Tensor]]]:
    """(chunk, {source key: flat float32 τ}) for every chunk, with a progress bar."""
    for chunk in progress_bar(chunks, description):
        _, taus = read_inputs(al, chunk.name, rows=(chunk.start, chunk.stop))
        yield chunk, {key: tau.reshape(-1) for key, tau in zip(al.sources, taus)}
