"""The JSON-lines files dots appends to one row at a time (the selection's difficulty record, an
interrupted confirmation's rows), read back: a kill can cut the last row short, and rows appended
after a cut one continue its line, so a line that is not JSON is said, not raised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["json_lines"]


def json_lines(path: Path) -> list[Any]:
    """Each line of `path` as JSON, None for a line that is not JSON (one a kill cut, or a row
    written after it); [] when there is no such file. Each reader decides what a None means."""
    if not path.is_file():
        return []
    rows: list[Any] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            rows.append(None)
    return rows
