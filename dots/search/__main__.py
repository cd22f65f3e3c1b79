"""`python -m dots.search [backbone=qwen7b] [key=value ...]`: the DoTS pipeline
(dots/conf/search.yaml). Rerunning the same command resumes where it stopped."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from dots.cli import prepare_command
from dots.errors import cli_errors
from dots.search.pipeline import run_search


@hydra.main(config_path="../conf", config_name="search", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    prepare_command()
    run_search(cfg)


if __name__ == "__main__":
    main()
