"""`python -m dots.lab [key=value ...]`: build the lab trio under <outputs root>/lab (or find
that build), print its paths and test accuracies. The search's `backbone=lab` uses the trio
shipped with dots (dots/data/lab, scores in its scores.json) when the settings are the
defaults; this command rebuilds it, or varies it (`seed=1`, `rlvr.lr=1e-5`, ...)."""

from __future__ import annotations

import argparse
import sys

from dots.errors import argument_error, cli_errors
from dots.lab.config import LabOptions

__all__ = ["main"]


def summary_table(paths: dict, cfg: LabOptions) -> object:
    """A rich table of greedy and sampled test accuracy per stage and skill."""
    from rich.table import Table

    from dots.lab import tasks as T
    from dots.lab.build import torch_threads
    from dots.lab.sampling import LocalEngine
    from dots.lab.score import accuracy

    e = cfg.eval
    problems = T.records(cfg.tasks, "test", size=e.per_skill * len(T.SKILLS))
    table = Table(title=f"lab test accuracy ({len(problems)} problems; A = add, B = sub)")
    for col in ("model", "A greedy", "B greedy", f"A T={e.temperature}", f"B T={e.temperature}"):
        table.add_column(col)
    with torch_threads(cfg.threads):
        for stage, path in paths.items():
            engine = LocalEngine(path)
            g = accuracy(engine, problems, n=1, temperature=0.0, max_tokens=e.max_tokens)
            s = accuracy(
                engine, problems, n=e.samples, temperature=e.temperature, max_tokens=e.max_tokens, seed=cfg.seed
            )
            table.add_row(stage, *(f"{r[k]:.3f}" for r, k in ((g, "add"), (g, "sub"), (s, "add"), (s, "sub"))))
    return table


@cli_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dots.lab", description=__doc__)
    parser.add_argument("overrides", nargs="*", help="conf/lab.yaml overrides, e.g. seed=1 rlvr.lr=1e-5")
    parser.error = argument_error  # type: ignore[method-assign]  # one line, not the usage
    args = parser.parse_args(argv)
    from rich.console import Console

    from dots.lab.build import ensure_trio
    from dots.lab.config import load_config

    cfg = load_config(args.overrides)
    paths = ensure_trio(args.overrides, shipped=False)
    console = Console()
    for stage, path in paths.items():
        print(f"{stage}: {path}", flush=True)
    if cfg.eval.enabled:
        console.print(summary_table(paths, cfg))


if __name__ == "__main__":
    main(sys.argv[1:])
