"""POSIX locks on files in a run directory (the kernel releases them when the holder dies).

`run_once_lock` waits: of several processes sharing a directory, one does the work and the
others then find it done. `held_by_one` does not wait: a second command on the same run
stops at once, naming the process (pid, host) that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from dots.errors import DotsError

__all__ = ["held_by_one", "run_once_lock"]


@contextlib.contextmanager
def run_once_lock(path: Path) -> Iterator[None]:
    """Exclusive POSIX lock on `path` (released by the kernel if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN)
        os.close(fd)


def describe_holder(path: Path) -> str:
    """'pid N on HOST since TIME' from a lock file written by `held_by_one` (or 'another process')."""
    try:
        info = json.loads(path.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        return f"pid {int(info['pid'])} on {info['host']} (since {since})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextlib.contextmanager
def held_by_one(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` for the block, or stop with a DotsError naming who holds
    it; the holder's pid, host and start time are written into the file for that message."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DotsError(
                f"{what} is in use by {describe_holder(path)}: wait for it to finish or stop it "
                "(several workers on one run: set search.workers and a shared search.storage)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN)
        os.close(fd)
