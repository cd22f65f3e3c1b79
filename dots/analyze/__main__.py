"""`python -m dots.analyze [backbone=...] [key=value ...]`: the task-vector anatomy of a
backbone's sources (docs/method.md §6) into analysis.json and figures (dots/conf/analyze.yaml)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Sequence

from omegaconf import DictConfig


def run_from_config(cfg: DictConfig) -> dict:
    """The command's work: every option checked (`dots.options.analyze`), then the configured
    backbone analysed into `output`."""
    from dots.analyze.run import REPORT_NAME, analyze
    from dots.options.analyze import analyze_options

    options = analyze_options(cfg)
    report = analyze(
        options.backbone.base,
        options.backbone.sources,
        options.output,
        options.analysis,
        revision=options.backbone.revision,
        force=options.force,
        config=options.config,
    )
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {options.output.resolve() / REPORT_NAME}")
    return report


def main(argv: Sequence[str] | None = None) -> None:
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
