"""`python -m dots.evaluate`: models × benchmarks (docs/method.md §7) with one live engine
(dots/conf/evaluate.yaml; see `dots.evaluate.run`)."""

from __future__ import annotations

from omegaconf import DictConfig

from dots.options.cli import hydra_command


def run(cfg: DictConfig) -> None:
    from dots.evaluate.run import run_evaluate  # (after the command line is checked: imports torch)
    from dots.options.evaluate import evaluate_options

    run_evaluate(evaluate_options(cfg))


cli = hydra_command("evaluate", run)

if __name__ == "__main__":
    cli()
