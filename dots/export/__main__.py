"""`python -m dots.export push DIR org/name [--private]`: upload an exported model (retry of a
failed push)."""

from __future__ import annotations

import sys
from pathlib import Path

from dots.errors import DotsError, cli_errors
from dots.export.hub import try_push
from dots.io.checkpoint import Checkpoint
from dots.io.inputs import check_checkpoint


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dots.export")
    sub = parser.add_subparsers(dest="cmd", required=True)
    push = sub.add_parser("push", help="upload an exported model directory to the Hub")
    push.add_argument("folder")
    push.add_argument("repo_id")
    push.add_argument("--private", action="store_true")
    args = parser.parse_args(argv)

    @cli_errors
    def run() -> None:
        folder = Path(args.folder)
        if not (folder / "config.json").exists():
            raise DotsError(f"not an exported model directory: {folder}")
        check_checkpoint(Checkpoint(folder))  # whole; config.json, tokenizer and weights agree: before uploading
        if not try_push(folder, args.repo_id, args.private):
            sys.exit(1)

    run()


if __name__ == "__main__":
    main()
