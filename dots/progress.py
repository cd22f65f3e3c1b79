"""Progress bars for long loops (rich), silent when DOTS_PROGRESS=0."""
from __future__ import annotations

import os
from typing import Iterable, Iterator, Sized, TypeVar

T = TypeVar("T")


def progress_enabled() -> bool:
    return os.environ.get("DOTS_PROGRESS", "1") != "0"


def progress_bar(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate `items` with a rich progress bar (count, rate, elapsed, ETA)."""
    if not progress_enabled():
        yield from items
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    if total is None and isinstance(items, Sized):
        total = len(items)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
