"""What dots keeps of the paths and files it writes: a destination resolved once (a loop of
symbolic links is one line, not a traceback), and the digest of each file an output's record
lists, so that a file a user edited after dots wrote it is never replaced without the output's
overwrite option (docs/outputs.md).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

from dots.errors import DotsError

__all__ = ["digest", "discard", "edited_file", "hashed_names", "resolved"]

HASHED_BYTES = 64 << 20  # files up to this size are recorded by SHA-256; larger (weights) by size and mtime


def resolved(path: str | os.PathLike, what: str) -> Path:
    """`path` with `~` expanded and symbolic links followed; a one-line DotsError naming `what`
    for a loop of links (Python's own is a RuntimeError traceback)."""
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as exc:
        reason = "a loop of symbolic links" if "loop" in str(exc).lower() else (getattr(exc, "strerror", "") or exc)
        raise DotsError(f"{what} {path} cannot be resolved: {reason}") from None


def digest(file: Path) -> str:
    """What a record remembers of a file's content: its SHA-256 (up to `HASHED_BYTES`), else its
    size and modification time (a weights file; a rename keeps both)."""
    if file.is_symlink():
        return "link:" + os.readlink(file)
    size = file.stat().st_size
    if size > HASHED_BYTES:
        return f"size:{size}:mtime_ns:{file.stat().st_mtime_ns}"
    return "sha256:" + hashlib.sha256(file.read_bytes()).hexdigest()


def edited_file(directory: Path, record: dict) -> str | None:
    """The first file the record lists whose content is no longer what dots wrote (None: none, or
    a record of an older dots without digests)."""
    for name, known in sorted((record.get("digests") or {}).items()):
        file = directory / name
        if os.path.lexists(file) and (file.is_file() or file.is_symlink()) and digest(file) != known:
            return name
    return None


def hashed_names(digits: int) -> Callable[[str], bool]:
    """Recognises the names a cache gives its entries: a hash of `digits` hex digits, with a
    leading dot and suffixes for its locks and unfinished entries."""

    def own(name: str) -> bool:
        stem = name.lstrip(".").split(".")[0]
        return len(stem) == digits and all(c in "0123456789abcdef" for c in stem)

    return own


def discard(entry: Path, owned: Callable[[str], bool]) -> None:
    """Remove a cache entry (a folder): the files `owned` recognises as its own, then the
    folder; a file dots did not write there stops it with one line, and is kept."""
    for f in list(entry.iterdir()):
        if owned(f.name) and (f.is_file() or f.is_symlink()):
            f.unlink()
    rest = sorted(entry.iterdir())
    if rest:
        raise DotsError(f"cache entry {entry} holds a file dots did not write ({rest[0]}): move it away")
    entry.rmdir()
