"""`python -m dots.analyze [backbone=...] [key=value ...]`: the task-vector anatomy of a
backbone's sources (docs/method.md §6) into analysis.json and figures (dots/conf/analyze.yaml)."""

from __future__ import annotations

import logging
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    from dots.analyze.run import run_from_config
    from dots.errors import cli_errors
    from dots.options.cli import prepare_command
    from dots.options.compose import compose

    prepare_command(logging.WARNING)
    overrides = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(overrides):
        print(__doc__)
        return
    cli_errors(lambda: run_from_config(compose("analyze", overrides)))()


if __name__ == "__main__":
    main()
