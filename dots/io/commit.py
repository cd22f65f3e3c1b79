"""The one commit protocol of everything dots writes (docs/outputs.md, "What a crash leaves").

A new version is written beside its destination under a temporary name (`temp_sibling`: pid and
host in it, a lock held while the writer lives), made durable (`sync_tree`), then switched in by
one rename: a file by `os.replace` (`atomic_file`), a directory by `os.rename` onto a new path or
an atomic exchange with the old version (`install_dir`; without one, a journaled switch that
`recover` finishes). What a dead writer left is removed by the next writer (`sweep`), said in one line.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator

__all__ = [
    "atomic_file",
    "claim_temp",
    "install_dir",
    "is_temporary",
    "recover",
    "release",
    "sweep",
    "sweep_inside",
    "sync_tree",
    "temp_sibling",
    "write_atomic",
]

log = logging.getLogger("dots.io")

NAME_MAX = 255  # bytes of one file name on every file system dots targets (ext4, xfs, btrfs, NFS, APFS)
ROLES = ("tmp", "old", "switch")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:4]
_TEMP = re.compile(r"\.(tmp|old|switch)-(\d+)@([0-9a-f]{4})-[0-9a-f]{6}$")


def _stem(name: str) -> str:
    """The part of a temporary name that names its destination: the name itself, or, where the
    name with the suffix would pass NAME_MAX bytes, its head and a hash of the whole name."""
    raw = name.encode()
    room = NAME_MAX - len(".") - len(".switch-4194304@abcd-abcdef")
    if len(raw) <= room:
        return name
    head = raw[: room - 9].decode("utf-8", "ignore")  # never half a character
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:8]}"


def is_temporary(name: str) -> bool:
    """`name` is one `temp_sibling` gives (a writer's, live or dead)."""
    return name.startswith(".") and _TEMP.search(name) is not None


def temp_sibling(dest: Path, role: str = "tmp") -> Path:
    """A fresh temporary path beside `dest` for this process: `.<name>.<role>-<pid>@<host>-<random>`,
    within NAME_MAX bytes for any legal destination name."""
    assert role in ROLES
    return dest.parent / f".{_stem(dest.name)}.{role}-{os.getpid()}@{_HOST}-{uuid.uuid4().hex[:6]}"


def _fsync(path: Path) -> None:
    """fsync a file or a folder (a folder's entry list: renames and new names in it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) * path.is_dir())
    try:
        os.fsync(fd)
    except OSError as exc:  # a folder that cannot be synced (some network file systems): its files were
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """Make `root` durable: every file under it, then every folder, bottom up."""
    if not root.is_dir():
        _fsync(root)
        return
    for folder, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            if not os.path.islink(os.path.join(folder, name)):
                _fsync(Path(folder, name))
        _fsync(Path(folder))


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = True) -> Iterator[Path]:
    """A temporary path to write `path`'s new content to (locked while this process lives); on
    success it replaces `path` in one rename (synced first when `durable`), on an exception it
    is removed and `path` kept."""
    tmp = temp_sibling(path)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield tmp
        if durable:
            os.fsync(fd)
        os.replace(tmp, path)
        if durable:
            _fsync(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, content: str | bytes, durable: bool = True) -> None:
    """Write `content` into `path` whole or not at all (`atomic_file`)."""
    with atomic_file(Path(path), durable) as tmp:
        tmp.write_bytes(content.encode() if isinstance(content, str) else content)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where this system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    old, new = os.fsencode(a), os.fsencode(b)
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        rc = libc.renameat2(-100, old, -100, new, 2)  # AT_FDCWD, RENAME_EXCHANGE
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        rc = libc.renamex_np(old, new, 2)  # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))


def install_dir(new: Path, dest: Path, discard_old: Callable[[Path], None]) -> None:
    """Switch the finished folder `new` (a `temp_sibling` of `dest`) in at `dest`: synced first,
    then one rename onto a new `dest`, or one atomic exchange with the old version, which
    `discard_old` then removes from its temporary name. Without an exchange: the switch
    journal, the old version renamed aside, the new one in, the journal removed (`recover`)."""
    sync_tree(new)
    with contextlib.suppress(OSError):  # the folder keeps the mode a user gave it
        os.chmod(new, os.stat(dest).st_mode & 0o7777)
    if not os.path.lexists(dest):
        os.rename(new, dest)
        _fsync(dest.parent)
        return
    if _exchange(new, dest):
        _fsync(dest.parent)
        _quietly(discard_old, new)  # `new` now names the old version
        return
    aside, journal = temp_sibling(dest, "old"), temp_sibling(dest, "switch")
    write_atomic(journal, json.dumps({"new": new.name, "old": aside.name}))
    os.rename(dest, aside)
    try:
        os.rename(new, dest)
    except OSError:
        os.rename(aside, dest)
        journal.unlink()
        raise
    _fsync(dest.parent)
    journal.unlink()
    _quietly(discard_old, aside)


def _quietly(discard_old: Callable[[Path], None], old: Path) -> None:
    """Remove a replaced version; a failure leaves it under its temporary name (the output is
    already whole: the next writer removes it), said in one line."""
    try:
        discard_old(old)
    except OSError as exc:
        log.warning("kept the replaced version at %s: %s", old, exc.strerror or exc)


def _leftovers(folder: Path, stem: str | None = None) -> Iterator[tuple[Path, str, int, str]]:
    """The temporary entries in `folder` (of the destination named `stem` only, when given):
    (path, role, pid, host)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        m = _TEMP.search(name)
        if m and name.startswith(".") and (stem is None or name == f".{stem}.{m.group(0)[1:]}"):
            yield folder / name, m.group(1), int(m.group(2)), m.group(3)


def _dead(path: Path, pid: int, host: str) -> bool:
    """Its writer is gone: on this host its pid runs no more, and its lock is free (where the
    file system has no locks, a writer on another host is taken to live)."""
    if host == _HOST:
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
            return False  # (or the pid was reused: kept, to be safe)
        except ProcessLookupError:
            pass
        except PermissionError:
            return False
    try:
        fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_RDWR)
    except OSError:
        return not os.path.lexists(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) and host == _HOST
    finally:
        os.close(fd)


def recover(dest: Path) -> None:
    """Finish a switch a dead writer journaled (`install_dir` without an exchange): the new
    version renamed in if `dest` is missing (else the old one back), the journal removed."""
    for journal, role, pid, host in list(_leftovers(dest.parent, _stem(dest.name))):
        if role != "switch" or not _dead(journal, pid, host):
            continue
        try:
            names = json.loads(journal.read_text())
        except (OSError, ValueError):
            names = {}
        if not os.path.lexists(dest):
            for side in ("new", "old"):
                kept = dest.parent / str(names.get(side, ""))
                if names.get(side) and kept.is_dir():
                    os.rename(kept, dest)
                    _fsync(dest.parent)
                    log.warning("finished the switch a dead dots writer began at %s (%s version)", dest, side)
                    break
        journal.unlink()


def sweep(dest: Path, discard_old: Callable[[Path], None] | None = None) -> list[Path]:
    """Remove what dead writers left beside `dest` (after `recover`): their unfinished new
    versions, and old versions through `discard_old` (which removes only what dots wrote; kept
    without one). Said in one line each; returns what was removed."""
    recover(dest)
    return _remove_dead(_leftovers(dest.parent, _stem(dest.name)), discard_old)


def sweep_inside(folder: Path, discard_old: Callable[[Path], None] | None = None) -> list[Path]:
    """`sweep` for every temporary entry of a folder that grows (a run directory, a cache root)
    and of its subfolders (not descending into the temporaries themselves)."""
    removed = []
    for here, dirs, _files in os.walk(folder):
        dirs[:] = [d for d in dirs if not _TEMP.search(d)]
        removed += _remove_dead(_leftovers(Path(here)), discard_old)
    return removed


def _remove_dead(found: Iterator[tuple[Path, str, int, str]], discard_old: Callable[[Path], None] | None) -> list[Path]:
    removed = []
    for path, role, pid, host in list(found):
        if role == "switch" or not _dead(path, pid, host):
            continue
        size = sum(f.lstat().st_size for f in [path, *path.rglob("*")] if not f.is_dir())
        if role == "tmp":
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        elif discard_old is not None:
            discard_old(path)
        else:
            continue
        removed.append(path)
        log.warning("removed %s in %s, left by a dots process that died (%.1f MB)", path.name, path.parent, size / 1e6)
    return removed


def claim_temp(dest: Path) -> Path:
    """A new temporary folder beside `dest`, locked for this process's life (see `_dead`)."""
    tmp = temp_sibling(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    fd = _HELD[str(tmp)] = os.open(tmp, os.O_RDONLY)  # held until `release` or the process's end
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return tmp


_HELD: dict[str, int] = {}


def release(path: Path) -> None:
    """Drop the lock `claim_temp` took (the folder was installed or removed)."""
    fd = _HELD.pop(str(path), None)
    if fd is not None:
        os.close(fd)
