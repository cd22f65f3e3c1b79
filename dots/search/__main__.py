"""`python -m dots.search [backbone=qwen7b] [key=value ...]`: the DoTS pipeline
(dots/conf/search.yaml). Rerunning the same command resumes where it stopped."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from dots.cli import check_command_line, prepare_command
from dots.errors import cli_errors


@hydra.main(config_path="../conf", config_name="search", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    prepare_command()
    from dots.search.pipeline import run_search  # (after the command line is checked: imports torch)

    run_search(cfg)


def cli() -> None:
    """The command: its command line checked by dots (one-line errors), then Hydra's `main`."""
    check_command_line("search")
    main()


if __name__ == "__main__":
    cli()
