"""`python -m dots.analyze [backbone=...] [key=value ...]`: the task-vector anatomy of a
backbone's sources (SPEC §6) into analysis.json and figures (dots/conf/analyze.yaml)."""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    from dots.analyze.run import run_from_config
    from dots.config import compose
    from dots.errors import cli_errors
    from dots.memory import reuse_freed_memory

    reuse_freed_memory()
    overrides = list(sys.argv[1:] if argv is None else argv)
    cli_errors(lambda: run_from_config(compose("analyze", overrides)))()


if __name__ == "__main__":
    main()
