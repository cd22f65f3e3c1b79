"""`python -m dots.evaluate`: models × benchmarks (SPEC §7) with one live engine
(dots/conf/evaluate.yaml; see `dots.evaluate.run`)."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from dots.errors import cli_errors
from dots.evaluate.run import run_evaluate
from dots.memory import reuse_freed_memory
from dots.signals import exit_on_sigterm


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    logging.getLogger("dots").setLevel(logging.INFO)
    reuse_freed_memory()
    exit_on_sigterm()
    run_evaluate(cfg)


if __name__ == "__main__":
    main()
