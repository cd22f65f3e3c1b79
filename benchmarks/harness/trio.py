"""A generated trio (base, sft, rlvr) on disk: benchmarks/gen_checkpoints.py run in a process of
its own, so that neither its memory nor its imports count in the process that measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def generate(out: Path, *options: str) -> None:
    """Run benchmarks/gen_checkpoints.py with `options` into `out`, in a process of its own (so its
    memory never counts in the measuring process)."""
    script = Path(__file__).resolve().parents[1] / "gen_checkpoints.py"
    subprocess.run([sys.executable, str(script), *options, "--out", str(out)], check=True)
