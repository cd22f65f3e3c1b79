"""Where dots finds the files it ships and where it writes.

Configs and data ship inside the package (`dots/conf`, `dots/data`), so an installed
wheel works from any directory. Everything dots writes goes under the outputs root:
`$DOTS_OUTPUTS`, else `outputs/` in the current directory. Caches (τ̃, Fisher tables) are
the user's, shared by every project on the same checkpoints: `$DOTS_CACHE`, else
`$XDG_CACHE_HOME/dots`, else `~/.cache/dots`. `check_creatable` tells, before anything is written, whether a
directory can be made where a command will write; `export_import_path` makes this
`dots` importable in the processes a command starts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from dots.errors import DotsError

__all__ = ["CONF_DIR", "DATA_DIR", "cache_root", "check_creatable", "export_import_path", "outputs_root"]

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"
DATA_DIR = PACKAGE_DIR / "data"


def outputs_root() -> Path:
    """$DOTS_OUTPUTS, else ./outputs."""
    return Path(os.environ.get("DOTS_OUTPUTS") or "outputs").expanduser()


def cache_root() -> Path:
    """$DOTS_CACHE, else $XDG_CACHE_HOME/dots, else ~/.cache/dots (task vectors, Fisher tables):
    one user-level cache, so two projects on the same checkpoints build an entry once."""
    if os.environ.get("DOTS_CACHE"):
        return Path(os.environ["DOTS_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dots"


def check_creatable(path: str | os.PathLike, what: str) -> Path:
    """`path` as an absolute Path when a directory there exists and is writable or can be made;
    else a one-line DotsError naming `what`. A probe directory is made and removed at once in
    the nearest existing ancestor: only trying tells a read-only mount, /proc or /sys from a
    writable directory (root ignores permission bits, `os.access` does not see them)."""
    target = Path(path).expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise DotsError(f"cannot create the {what} {target}: {existing} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dots-probe-", dir=existing))
    except OSError as exc:
        raise DotsError(f"cannot create the {what} {target}: {exc.strerror or exc} (in {existing})") from None
    return target


def export_import_path() -> None:
    """Make this `dots` importable in child processes (vLLM's workers, the reaper), spawned or forked."""
    root = str(PACKAGE_DIR.parent)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
    if root not in sys.path:
        sys.path.insert(0, root)
