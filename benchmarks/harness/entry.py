"""The one door of every question: `python -m benchmarks.<question> <variant> [options]` runs the
variant's module as `python -m` would (its own options after the variant's name), or its script.

Each question's package lists its variants in `VARIANTS` (name → `Variant`) and, in `SMOKE` (and
`SLOW_SMOKE`, for runs over ~30 s on 2 cores), the command lines of its smallest run on the lab or
a generated model (`{tmp}` stands for a scratch directory), which tests/test_benchmarks.py runs;
a new variant is one more entry of `VARIANTS`.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.results import REPO

__all__ = ["Variant", "dispatch", "module_command", "repo_env"]


@dataclass(frozen=True)
class Variant:
    """One way of answering a question: a module run as `python -m` (or a bash script beside it)."""

    target: str
    what: str

    @property
    def script(self) -> Path | None:
        """The bash script of a script variant (`target` ends in .sh), else None."""
        return REPO / self.target if self.target.endswith(".sh") else None


def repo_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default os.environ) with this checkout first on PYTHONPATH, so that a process started
    from anywhere runs this checkout's benchmarks and dots."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs `module` as `python -m` with this interpreter (pair with repo_env)."""
    return [sys.executable, "-m", module, *args]


def usage(question: str, doc: str, variants: dict[str, Variant]) -> str:
    """The question, then one line per variant."""
    width = max(map(len, variants))
    lines = [f"python -m benchmarks.{question} VARIANT [options]   (VARIANT --help: its options)", "", doc.strip(), ""]
    return "\n".join(lines + [f"  {name:<{width}}  {v.what}" for name, v in variants.items()])


def dispatch(question: str, doc: str, variants: dict[str, Variant], argv: list[str] | None = None) -> None:
    """Run the variant named by the first argument with the rest as its own command line."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(question, doc, variants))
        raise SystemExit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in variants:
        raise SystemExit(f"error: no variant {name!r} of benchmarks.{question}; choose from {', '.join(variants)}")
    variant = variants[name]
    os.environ["PYTHONPATH"] = repo_env()["PYTHONPATH"]
    if variant.script is not None:
        raise SystemExit(subprocess.run(["bash", str(variant.script), *rest]).returncode)
    sys.argv = [f"python -m benchmarks.{question} {name}", *rest]
    runpy.run_module(variant.target, run_name="__main__")
