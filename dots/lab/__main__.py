"""`python -m dots.lab [--rebuild] [--model NAME=DIR ...] [key=value ...]`: the lab trio's paths and
test accuracies (in %), with any other model of the lab (a search's export) beside them.

With the defaults it is the trio shipped with dots (dots/data/lab), which the search's
`backbone=lab` uses: nothing is trained. `--rebuild` retrains it under <outputs root>/lab;
any override (`seed=1`, `rlvr.lr=1e-5`, ...) builds that variant there (or finds its build).
Before any training it says how long the shipped trio's build took. The A∪B greedy column is
the lab's ground truth (docs/lab.md): `--model dots=outputs/search/<run>/model` scores a pick."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dots.errors import argument_error, cli_errors
from dots.lab.config import STAGES, LabOptions, shipped_dir, stage_dir

__all__ = ["main", "where_line"]


def build_time(stages: list[str]) -> float:
    """Seconds the shipped trio's build spent on `stages` (each stage's lab.json `seconds`)."""
    import json

    from dots.lab.config import SHIPPED

    total = 0.0
    for stage in stages:
        for record in SHIPPED.glob(f"{stage}-*/lab.json"):
            total += float(json.loads(record.read_text()).get("seconds") or 0.0)
    return total


def where_line(cfg: LabOptions, rebuild: bool) -> str:
    """One line: the shipped trio is used, a build is found, or what will be trained and how long it took."""
    shipped = all(shipped_dir(cfg, s) for s in STAGES)
    if shipped and not rebuild:
        return (
            f"lab trio: the one shipped with dots ({Path(str(shipped_dir(cfg, 'base'))).parent}), "
            "not retrained; --rebuild trains it again"
        )
    todo = [s for s in STAGES if not stage_dir(cfg, s).is_dir()]
    if not todo:
        return f"lab trio: found the build in {stage_dir(cfg, 'base').parent}"
    minutes = build_time(todo) / 60
    return (
        f"lab trio: training {', '.join(todo)} in {stage_dir(cfg, 'base').parent}: the shipped build of "
        f"these took {minutes:.0f} min on an idle 2-core VM (up to 8 times that on a loaded one)"
    )


def summary_table(paths: dict, cfg: LabOptions) -> object:
    """A rich table of test accuracy in % per stage: per skill and both, greedy and sampled."""
    from rich.table import Table

    from dots.lab import tasks as T
    from dots.lab.build import torch_threads
    from dots.lab.sampling import LocalEngine
    from dots.lab.score import accuracy

    e = cfg.eval
    problems = T.records(cfg.tasks, "test", size=e.per_skill * len(T.SKILLS))
    sampled = f"T={e.temperature}, avg@{e.samples}"
    table = Table(title=f"lab test accuracy, % ({len(problems)} problems, A = add, B = sub)")
    columns = ["model", "A greedy", "B greedy", "A∪B greedy"] + [f"A {sampled}", f"B {sampled}"] * (e.samples > 0)
    for col in columns:
        table.add_column(col, justify="left" if col == "model" else "right")
    with torch_threads(cfg.threads):
        for stage, path in paths.items():
            engine = LocalEngine(path)
            g = accuracy(engine, problems, n=1, temperature=0.0, max_tokens=e.max_tokens)
            cells = [(g, "add"), (g, "sub"), (g, "all")]
            if e.samples:
                s = accuracy(
                    engine, problems, n=e.samples, temperature=e.temperature, max_tokens=e.max_tokens, seed=cfg.seed
                )
                cells += [(s, "add"), (s, "sub")]
            table.add_row(stage, *(f"{100 * r[k]:.1f}" for r, k in cells))
    return table


@cli_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dots.lab", description=__doc__)
    parser.add_argument("overrides", nargs="*", help="conf/lab.yaml overrides, e.g. seed=1 rlvr.lr=1e-5")
    parser.add_argument("--rebuild", action="store_true", help="train the default trio instead of the shipped one")
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="another lab model to score, e.g. a pick"
    )
    parser.error = argument_error  # type: ignore[method-assign]  # one line, not the usage
    args = parser.parse_args(argv)
    from rich.console import Console

    from dots.lab.build import ensure_trio
    from dots.lab.config import load_config

    cfg = load_config(args.overrides)
    extra = dict(named_model(item) for item in args.model)  # (checked before anything is said or trained)
    print(where_line(cfg, args.rebuild), flush=True)
    paths = ensure_trio(args.overrides, shipped=not args.rebuild)
    for stage, path in paths.items():
        print(f"{stage}: {path}", flush=True)
    if cfg.eval.enabled:
        Console().print(summary_table({**paths, **extra}, cfg))


def named_model(item: str) -> tuple[str, Path]:
    """`--model NAME=DIR`: a name for the table and an existing checkpoint directory; else one line."""
    from dots.errors import DotsError

    name, sep, where = item.partition("=")
    path = Path(where).expanduser()
    if not sep or not name or not (path / "config.json").is_file():
        raise DotsError(f"--model {item}: give NAME=DIR, DIR a model directory (with config.json)")
    return name, path


if __name__ == "__main__":
    main(sys.argv[1:])
