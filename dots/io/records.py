"""The record of a dots output, `.dots-output.json` (docs/outputs.md): what it holds, how it is
written (whole or not at all), and what it lets dots remove — the files it lists, never others.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Iterable

from dots.io.commit import write_atomic
from dots.io.contents import digest

__all__ = ["RECORD", "discard_output", "files_under", "new_record", "read_record", "seal", "withdraw", "write_record"]

log = logging.getLogger("dots.io")

RECORD = ".dots-output.json"


def read_record(directory: str | os.PathLike) -> dict | None:
    """The record of a dots output in `directory`, or None (none, or not one dots wrote)."""
    try:
        record = json.loads((Path(directory) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("kind"), str) else None


def files_under(root: Path) -> list[str]:
    """Every file (and symbolic link) under `root`, as sorted relative POSIX paths."""
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        for name in files + [d for d in dirs if (here / d).is_symlink()]:
            found.append((here / name).relative_to(root).as_posix())
    return sorted(found, key=lambda p: (p.count("/"), p))


def new_record(
    kind: str,
    files: Iterable[str] | None = None,
    run_dir: str | os.PathLike | None = None,
    root: Path | None = None,
) -> dict:
    """The record of an output of `kind` written now by this command (with the digest of each of
    `files` when `root`, their directory, is given)."""
    from dots import __version__

    record: dict = {
        "kind": kind,
        "dots_version": __version__,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if files is not None:
        record["files"] = sorted(f for f in files if f != RECORD)
        if root is not None:
            record["digests"] = {f: digest(root / f) for f in record["files"]}
    if run_dir is not None:
        record["run_dir"] = str(Path(run_dir).expanduser().resolve())
    return record


def seal(
    directory: str | os.PathLike, kind: str, run_dir: str | os.PathLike | None = None, identity: str | None = None
) -> None:
    """Write the record of a finished output of `kind` in `directory`, listing every file in it
    (the files a later replacement removes), with the `identity` of the command that made it."""
    root = Path(directory)
    mine = {"identity": identity} if identity else {}
    write_record(root, {**new_record(kind, files_under(root), run_dir, root), **mine})


def write_record(directory: Path, record: dict) -> None:
    """Write the record whole or not at all (a concurrent claim never reads half of one)."""
    write_atomic(directory / RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")


def discard_output(folder: Path) -> None:
    """Remove a replaced version of an output (under its temporary name): the files its record lists,
    the record, the folders left empty. A file dots did not write keeps the folder, and is named."""
    record = read_record(folder) or {}
    for name in record.get("files") or ():
        _remove_listed(folder, name)
    (folder / RECORD).unlink(missing_ok=True)
    rest = files_under(folder)
    if rest:
        log.warning("kept %s: it holds %s, which dots did not write (the output beside it is whole)", folder, rest[0])
        return
    shutil.rmtree(folder)  # folders only, all empty


def _remove_listed(root: Path, name: str) -> None:
    """Remove the file `name` (relative to `root`, as a record lists it) and the folders it
    leaves empty; a name that leads outside `root` is ignored."""
    target = root / name
    if ".." in Path(name).parts or Path(name).is_absolute():
        return
    if target.is_symlink() or target.is_file():
        target.unlink()
    folder = target.parent
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


def withdraw(directory: Path, own: Iterable[str]) -> bool:
    """Undo a claim that found a bad input only after it made `directory`: removed when it holds
    nothing but its record and the names `own` recognises (what the failed command wrote); True if so."""
    names = set(own) | {RECORD}
    try:
        entries = os.listdir(directory)
    except OSError:
        return False
    if any((e not in names and not e.endswith(".lock")) or (directory / e).is_dir() for e in entries):
        return False
    for entry in entries:
        (directory / entry).unlink()
    directory.rmdir()
    return True
