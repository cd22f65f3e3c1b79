"""`python -m dots.analyze [backbone=...] [key=value ...]`: the task-vector anatomy of a
backbone's sources (docs/method.md §6) into analysis.json and figures (dots/conf/analyze.yaml)."""

from __future__ import annotations

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
    from dots.analyze.figures import FIGURES
    from dots.runtime.progress import log_third_party

    out = options.output.resolve()
    if out.is_dir():
        log_third_party(out / "third_party.log")  # other libraries' lines, off the terminal
    print(summary_line(report["summary"]))
    figures = [name for name in FIGURES if (out / name).exists()] if options.analysis.figures else []
    drawn = f" and {len(figures)} figures there: {', '.join(figures)}" if figures else ""
    print(f"wrote {out / REPORT_NAME}{drawn}")
    return report


def summary_line(summary: dict) -> str:
    """The headline of analysis.json's summary in one line: each source's norm and share of entries
    changed, the norm ratio and the raw sign conflict (in %, as the figures show them)."""
    parts = [
        f"{k}: ‖τ‖ {summary['norm'][k]:.3g}, {100 * summary['sparsity'][k]:.1f}% of entries unchanged"
        for k in summary.get("norm", {})
    ]
    if summary.get("norm_ratio") is not None:
        parts.append(f"norm ratio {summary['norm_ratio']:.1f}")
    if summary.get("sign_conflict_raw") is not None:
        parts.append(f"sign conflict {100 * summary['sign_conflict_raw']:.1f}%")
    return "analysis: " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    from dots.errors import cli_errors
    from dots.options.cli import command_help, prepare_command
    from dots.options.compose import compose

    overrides = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(overrides):
        print(command_help("analyze", __doc__ or "", hydra=False))
        return
    prepare_command(logging.WARNING)
    cli_errors(lambda: run_from_config(compose("analyze", overrides)))()


if __name__ == "__main__":
    main()
