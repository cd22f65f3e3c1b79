"""Streaming, atomic safetensors writer.

`CheckpointWriter` lays out every shard from a plan of (name, shape, dtype) before any
data arrives, so each tensor is written straight to its final offset and freed: no
buffering, any write order. It writes into a temporary sibling directory and renames it
into place only when every planned tensor has been written, with the process's ordinary
file modes (`dots.io.modes`) and the record of a dots output (`dots.io.destination`): an
existing destination is replaced only as `Destination.install` allows.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import shutil
import threading
from pathlib import Path
from typing import Iterable, Mapping

import torch

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.commit import release
from dots.io.destination import RECORD, Destination, claim
from dots.io.modes import apply_umask, copy_file
from dots.io.safetensors import TensorInfo, lay_out, tensor_bytes

__all__ = ["CheckpointWriter", "check_free_space", "disk_write_error"]


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


def check_free_space(out_dir: Path, nbytes: int) -> None:
    """A DotsError when the filesystem that will hold `out_dir` has less than `nbytes` free:
    found before anything is written (a write can still run out later, if others fill it)."""
    where = out_dir.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return
    if free < nbytes:
        raise DotsError(
            f"not enough space for {out_dir}: it needs {nbytes / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB are free on {where}"
        )


def disk_write_error(out_dir: Path, exc: OSError) -> DotsError:
    """A write under `out_dir` that failed for a reason of the disk (full, read-only, quota),
    as one line; the caller has removed what it had written."""
    full = " (no space left on the device: nothing was kept)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return DotsError(f"cannot write {out_dir}: {exc.strerror or exc}{full}")


class CheckpointWriter:
    """Write a planned set of tensors as (sharded) safetensors, atomically.

    `plan` maps every output name to its TensorInfo; shard layout and headers are fixed
    up front, then `write(name, tensor)` puts each tensor at its offset in any order (from
    a background thread, so disk writes overlap the caller's next computation).
    `out_dir` is a claimed `Destination`, or a path claimed here as a "checkpoint" output.
    `commit()` checks that everything was written, copies aux files and installs the
    temporary directory at `out_dir` (`Destination.install`: synced, then one rename or atomic
    exchange). On error (or `abort()`), nothing is left behind; after a kill, the next writer
    of `out_dir` removes what this one left.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike | Destination,
        plan: Mapping[str, TensorInfo],
        max_shard_bytes: int = 5 * 2**30,
        overwrite: bool = False,
        metadata: Mapping[str, str] | None = None,
        weights_name: str = "model",
    ):
        self.destination = out_dir if isinstance(out_dir, Destination) else claim(out_dir, "checkpoint", overwrite)
        self.out_dir = self.destination.path
        if not plan:
            raise DotsError("nothing to write: the tensor plan is empty")
        self.plan = dict(plan)
        check_free_space(self.out_dir, sum(info.nbytes for info in self.plan.values()))
        try:
            self.tmp_dir = self.destination.begin()  # beside out_dir; what a dead writer left is removed
        except OSError as exc:
            raise self._failure(exc) from None
        try:
            self._lay_out(max_shard_bytes, {"format": "pt", **(metadata or {})}, weights_name)
        except OSError as exc:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            raise self._failure(exc) from None
        self._open: dict[Path, object] = {}
        self._written: set[str] = set()
        self._rows_written: dict[str, int] = {}
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _lay_out(self, max_shard_bytes: int, meta: Mapping[str, str], weights_name: str) -> None:
        """Every shard file with its header, at its final size (sparse until written)."""
        shards = _shard_plan(self.plan, max_shard_bytes)
        n = len(shards)
        self._files: dict[str, tuple[Path, int]] = {}
        self.weight_map: dict[str, str] = {}
        for i, names in enumerate(shards, 1):
            fname = f"{weights_name}.safetensors" if n == 1 else f"{weights_name}-{i:05d}-of-{n:05d}.safetensors"
            path = self.tmp_dir / fname
            for name, offset in lay_out(path, names, self.plan, meta).items():
                self._files[name] = (path, offset)
                self.weight_map[name] = fname
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
            raise ValueError(
                f"{name}: rows {start}..{start + rows.shape[0]} of shape {tuple(rows.shape)} "
                f"do not fit planned {info.shape}"
            )
        self._queue_bytes(name, start * (info.nbytes // info.shape[0]), rows, info)
        done = self._rows_written[name] = self._rows_written.get(name, 0) + rows.shape[0]
        if done == info.shape[0]:
            self._written.add(name)

    def _queue_bytes(self, name: str, offset: int, tensor: torch.Tensor, info: TensorInfo) -> None:
        data = tensor_bytes(tensor, info.dtype)
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
            self.abort()
            raise self._failure(self._error)

    def _failure(self, exc: BaseException) -> BaseException:
        """A write that failed for a reason of the disk (full, read-only, quota) as one line;
        anything else as it was."""
        if not isinstance(exc, OSError):
            return exc
        return disk_write_error(self.out_dir, exc)

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
        """Put a file with `content` next to the weights (written on commit, with them)."""
        target = self.tmp_dir / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        except OSError as exc:
            raise self._failure(exc) from None

    def copy_file(self, source: str | os.PathLike, name: str | None = None) -> None:
        """Copy the file `source` next to the weights, as `name` (default: its own name)."""
        try:
            copy_file(source, self.tmp_dir / (name or Path(source).name))
        except OSError as exc:
            raise self._failure(exc) from None

    def commit(self, copy_from: Checkpoint | str | os.PathLike | None = None) -> Path:
        """Check completeness, copy aux files from `copy_from`, move into place. A disk error
        (full, read-only) removes the temporary directory and is one DotsError line."""
        try:
            return self._commit(copy_from)
        except OSError as exc:
            self.abort()
            raise self._failure(exc) from None

    def _commit(self, copy_from: Checkpoint | str | os.PathLike | None) -> Path:
        self._finish_background()
        if self._error is not None:
            self.abort()
            raise self._failure(self._error)
        missing = [n for n in self.plan if n not in self._written]
        if missing:
            self.abort()
            raise RuntimeError(f"{len(missing)} planned tensors were never written (first: {missing[0]})")
        if copy_from is not None:
            if isinstance(copy_from, Checkpoint):
                files = copy_from.aux_files()
            else:
                files = [p for p in Path(copy_from).iterdir() if p.is_file() and p.name != RECORD]
            for f in files:
                if not (self.tmp_dir / f.name).exists():
                    self.copy_file(f)
        if self.index_name:
            total = sum(i.nbytes for i in self.plan.values())
            index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(self.weight_map.items()))}
            (self.tmp_dir / self.index_name).write_text(json.dumps(index, indent=2))
        apply_umask(self.tmp_dir)
        try:
            return self.destination.install(self.tmp_dir)  # checked again: removes only what dots wrote
        except DotsError:
            self.abort()
            raise

    def abort(self) -> None:
        self._finish_background()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        release(self.tmp_dir)

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self.tmp_dir.exists():  # left without commit
            self.abort()
