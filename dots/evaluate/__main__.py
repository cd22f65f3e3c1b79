"""`python -m dots.evaluate`: models × benchmarks (SPEC §7) with one live engine
(dots/conf/evaluate.yaml; see `dots.evaluate.run`)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from dots.cli import check_command_line, prepare_command
from dots.errors import cli_errors


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    prepare_command()
    from dots.evaluate.run import run_evaluate  # (after the command line is checked: imports torch)

    run_evaluate(cfg)


def cli() -> None:
    """The command: its command line checked by dots (one-line errors), then Hydra's `main`."""
    check_command_line("evaluate")
    main()


if __name__ == "__main__":
    cli()
