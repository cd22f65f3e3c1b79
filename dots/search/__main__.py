"""`python -m dots.search [backbone=qwen7b] [key=value ...]`: the DoTS pipeline
(dots/conf/search.yaml). Rerunning the same command resumes where it stopped."""

from __future__ import annotations

from omegaconf import DictConfig

from dots.options.cli import hydra_command


def run(cfg: DictConfig) -> None:
    from dots.search.pipeline import run_search  # (after the command line is checked: imports torch)

    run_search(cfg)


cli = hydra_command("search", run)

if __name__ == "__main__":
    cli()
