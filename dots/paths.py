"""Where dots finds the files it ships and where it writes.

Configs and data ship inside the package (`dots/conf`, `dots/data`), so an installed
wheel works from any directory. Everything dots writes goes under the outputs root:
`$DOTS_OUTPUTS`, else `outputs/` in the current directory; caches under `$DOTS_CACHE`,
else `<outputs root>/cache`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"
DATA_DIR = PACKAGE_DIR / "data"


def outputs_root() -> Path:
    """$DOTS_OUTPUTS, else ./outputs."""
    return Path(os.environ.get("DOTS_OUTPUTS") or "outputs").expanduser()


def cache_root() -> Path:
    """$DOTS_CACHE, else <outputs root>/cache (task vectors, Fisher tables)."""
    return Path(os.environ.get("DOTS_CACHE") or outputs_root() / "cache").expanduser()
