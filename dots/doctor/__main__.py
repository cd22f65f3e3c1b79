r"""`python -m dots.doctor`: the first command on a new node.

    python -m dots.doctor [--shapes CONFIG_JSON] [--shape tiny|real] [--layers N] [--keep] \
        [search overrides: backbone=qwen7b engine=vllm engine.tensor_parallel_size=2 ...]

Checks torch, CUDA, transformers and vLLM against the tested ranges, lists the devices and
their free memory, prints the memory plan of `backbone=`, then runs end to end on a small
generated model of the backbone's architecture (nothing is downloaded): engine start, the
swap canary, three timed swaps (at `engine.tensor_parallel_size` when given). Prints a verdict
table and one line per failure with what to do. Exit code 0 when every check holds, 1 when
one fails, 2 on bad input (an unknown backbone, an unreadable config).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from dots.checks import positive_int
from dots.doctor.checks import Row, device_rows, library_rows, plan_row
from dots.errors import argument_error, cli_errors
from dots.runtime.progress import log_third_party, quiet_third_party

MARK = {"ok": "ok", "warn": "warn", "info": "", "FAIL": "FAIL"}


def table(rows: list[Row]) -> str:
    width = max(len(r.check) for r in rows)
    return "\n".join(f"  {r.check:<{width}}  {MARK[r.status]:<4}  {r.detail}" for r in rows)


def diagnose(argv: Sequence[str]) -> tuple[list[Row], str]:
    """Every check's row and the command line it describes."""
    parser = argparse.ArgumentParser(prog="python -m dots.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="a config.json giving the architecture (default: the backbone's base)")
    parser.add_argument("--shape", choices=["tiny", "real"], default="tiny", help="tiny widths or the model's own")
    parser.add_argument("--layers", default=2, help="layers of the generated model")
    parser.add_argument("--keep", action="store_true", help="keep the generated model and logs (printed)")
    parser.error = argument_error  # type: ignore[method-assign]
    args, overrides = parser.parse_known_args(argv)
    layers = positive_int(args.layers, "--layers")
    quiet_third_party()  # transformers' deprecations and bars: in <workdir>/third_party.log (--keep keeps it)
    from dots.doctor.end_to_end import architecture, end_to_end
    from dots.options.compose import compose
    from dots.options.search import plan_options

    cfg = compose("search", overrides)  # a bad backbone or option: one line, exit 2
    options = plan_options(cfg)
    config = architecture(options, args.shapes)
    rows = library_rows(options.engine.name)
    rows += device_rows()
    rows.append(plan_row(options, args.shapes))
    workdir = Path(tempfile.mkdtemp(prefix="dots-doctor-"))
    log_third_party(workdir / "third_party.log")
    try:
        rows += end_to_end(options, config, args.shape, layers, workdir)
    finally:
        if args.keep:
            print(f"kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return rows, " ".join([f"backbone={cfg.backbone.name}", *(o for o in argv if not o.startswith("backbone="))])


@cli_errors
def main(argv: Sequence[str] | None = None) -> None:
    rows, what = diagnose(list(sys.argv[1:] if argv is None else argv))
    failed = [r for r in rows if r.status == "FAIL"]
    print(f"\ndots doctor: {what.strip()}")
    print(table(rows))
    for r in failed:
        print(f"FAIL {r.check}: {r.detail}" + (f" — {r.todo}" if r.todo else ""))
    warned = [r for r in rows if r.status == "warn" and r.todo]
    for r in warned:
        print(f"note {r.check}: {r.todo}")
    print("verdict: " + ("ready" if not failed else f"not ready ({len(failed)} check(s) failed)"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
