"""What a command's terminal shows: progress bars for long work (rich: count, elapsed, ETA; silent
when DOTS_PROGRESS=0), and dots' own lines only, other libraries' going to the command's log file."""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sized, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["log_third_party", "new_progress", "progress_bar", "quiet_third_party"]

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


# --- other libraries' lines: kept off the terminal, written to the command's log file ------------


def _own(record: logging.LogRecord) -> bool:
    """A line the terminal shows: dots' own, or an error from anyone."""
    return record.name == "dots" or record.name.startswith("dots.") or record.levelno >= logging.ERROR


class _Held(logging.handlers.MemoryHandler):
    """Other libraries' records, held until the command names its log file (`log_third_party`)."""

    def shouldFlush(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging's name)
        return self.target is not None


_HELD = _Held(capacity=0)
_HELD.addFilter(lambda r: not _own(r))


def quiet_third_party() -> None:
    """From now on the terminal shows dots' lines and errors only: other libraries' log records
    (transformers' deprecations, huggingface_hub's retries, matplotlib's font cache) and Python
    warnings are held for the log file, and transformers' and the Hub's progress bars are off."""
    root = logging.getLogger()
    terminal = [h for h in root.handlers if type(h) is logging.StreamHandler]  # (not pytest's, not files)
    if not terminal:  # (a command Hydra did not configure: dots' warnings as Python's last resort shows them)
        terminal = [logging.StreamHandler()]
        terminal[0].setLevel(logging.WARNING)
        root.addHandler(terminal[0])
    for handler in terminal:
        if _own not in handler.filters:
            handler.addFilter(_own)
    if _HELD not in root.handlers:
        root.addHandler(_HELD)
    logging.captureWarnings(True)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import huggingface_hub.utils as hub
        import transformers.utils.logging as tf

        tf.disable_default_handler()  # (its own stderr handler: through the root logger instead)
        tf.enable_propagation()
        tf.disable_progress_bar()
        hub.disable_progress_bars()
    except ImportError:  # (a command without them)
        pass
    hub_root = logging.getLogger("huggingface_hub")  # (it too prints through a handler of its own)
    for handler in [h for h in hub_root.handlers if type(h) is logging.StreamHandler]:
        hub_root.removeHandler(handler)
    hub_root.propagate = True


def log_third_party(path: Path) -> Path:
    """Other libraries' records so far, and from now on, appended to `path` (a run's dots.log)."""
    if _HELD.target is not None:
        _HELD.target.close()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    _HELD.setTarget(handler)
    _HELD.flush()
    return path
