"""A generated trio (base, sft, rlvr) on disk: benchmarks/harness/generate.py run in a process of
its own, so that neither its memory nor its imports count in the process that measures."""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.harness.entry import module_command, repo_env


def generate(out: Path, *options: str) -> None:
    """Run benchmarks/harness/generate.py with `options` into `out`, in a process of its own (so its
    memory never counts in the measuring process)."""
    command = module_command("benchmarks.harness.generate", *options, "--out", str(out))
    subprocess.run(command, check=True, env=repo_env())
