"""`python -m dots.search [backbone=qwen7b] [key=value ...]`: the DoTS pipeline
(dots/conf/search.yaml). Rerunning the same command resumes where it stopped."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from dots.errors import cli_errors
from dots.memory import reuse_freed_memory
from dots.search.pipeline import run_search
from dots.signals import exit_on_sigterm


@hydra.main(config_path="../conf", config_name="search", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    logging.getLogger("dots").setLevel(logging.INFO)
    reuse_freed_memory()
    exit_on_sigterm()
    run_search(cfg)


if __name__ == "__main__":
    main()
