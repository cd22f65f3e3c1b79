"""A generated trio (base, sft, rlvr) on disk: benchmarks/harness/generate.py run in a process of
its own, so that neither its memory nor its imports count in the process that measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.harness.entry import module_command, repo_env


def generate(out: Path, *options: str) -> None:
    """Run benchmarks/harness/generate.py with `options` into `out`, in a process of its own (so its
    memory never counts in the measuring process)."""
    command = module_command("benchmarks.harness.generate", *options, "--out", str(out))
    subprocess.run(command, check=True, env=repo_env())


def trio_command(command: str, root: Path, out: Path, *extra: str) -> list[str]:
    """`python -m dots.merge method=ties` or `python -m dots.analyze` on the trio under `root`,
    written to `out` (replacing what an earlier run wrote there), with `extra` overrides."""
    sources = [f"+backbone.sources.sft={root / 'sft'}", f"+backbone.sources.rlvr={root / 'rlvr'}"]
    if command == "merge":
        args = [
            "dots.merge",
            "method=ties",
            f"backbone.base={root / 'base'}",
            *sources,
            f"output={out}",
            "overwrite=true",
        ]
    else:
        args = ["dots.analyze", "~backbone", "+backbone.name=bench", f"+backbone.base={root / 'base'}", *sources]
        args += [f"output={out}", "force=true"]
    return [sys.executable, "-m", *args, *extra]
