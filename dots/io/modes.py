"""Files dots writes get the process's ordinary permissions (0o666 & ~umask).

safetensors' `save_file` (and so transformers' `save_pretrained`) creates its file with
mode 0600, and `shutil.copy2` carries a source's mode along; outputs written next to
files made by `open()` would then differ from their neighbours and be unreadable by the
group that shares a cluster directory. `apply_umask` resets a finished file or tree.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["apply_umask"]


def current_umask() -> int:
    """The process's umask, read from /proc (no race); else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike) -> None:
    """Give `path` (and, for a directory, everything under it) the modes `open()` and `mkdir()`
    would have given: files 0o666 & ~umask, directories 0o777 & ~umask."""
    mask = current_umask()
    root = Path(path)
    if root.is_file():
        os.chmod(root, 0o666 & ~mask)
        return
    os.chmod(root, 0o777 & ~mask)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o777 & ~mask)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o666 & ~mask)


def copy_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy the contents (not the mode: `shutil.copy2` would keep a 0600 source's) of `source`."""
    shutil.copyfile(source, target)
    apply_umask(target)
