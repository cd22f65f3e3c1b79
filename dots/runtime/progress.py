"""Progress bars for long work (rich): count, elapsed, ETA; silent when DOTS_PROGRESS=0."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable, Iterator, Sized, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["new_progress", "progress_bar"]

T = TypeVar("T")


def progress_enabled() -> bool:
    return os.environ.get("DOTS_PROGRESS", "1") != "0"


def new_progress(label: str = "{task.description}", status: bool = False) -> Progress:
    """A rich Progress with dots' columns: `label` (a rich format string), bar, done/total,
    elapsed, ETA and, with `status`, the task's `status` field (e.g. the best trial so far)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    if status:
        columns.append(TextColumn("{task.fields[status]}"))
    return Progress(*columns, disable=not progress_enabled())


def progress_bar(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate `items` with a progress bar."""
    if not progress_enabled():
        yield from items
        return
    if total is None and isinstance(items, Sized):
        total = len(items)
    with new_progress() as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
