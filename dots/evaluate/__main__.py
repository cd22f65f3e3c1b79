"""`python -m dots.evaluate`: models × benchmarks (SPEC §7) with one live engine
(dots/conf/evaluate.yaml; see `dots.evaluate.run`)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from dots.cli import prepare_command
from dots.errors import cli_errors
from dots.evaluate.run import run_evaluate


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
@cli_errors
def main(cfg: DictConfig) -> None:
    prepare_command()
    run_evaluate(cfg)


if __name__ == "__main__":
    main()
