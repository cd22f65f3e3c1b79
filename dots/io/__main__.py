"""`python -m dots.io`: convert a `.bin` checkpoint to safetensors, or list a checkpoint's tensors."""

from __future__ import annotations

from dots.errors import argument_error, cli_errors
from dots.io.checkpoint import Checkpoint
from dots.io.convert import convert_bin_to_safetensors


@cli_errors
def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dots.io")
    sub = parser.add_subparsers(dest="cmd", required=True)
    conv = sub.add_parser("convert", help="convert a .bin checkpoint directory to safetensors")
    conv.add_argument("src")
    conv.add_argument("out")
    conv.add_argument("--overwrite", action="store_true")
    info = sub.add_parser("info", help="list tensors of a checkpoint")
    info.add_argument("src")
    parser.error = argument_error  # type: ignore[method-assign]  # one line, not the usage
    args = parser.parse_args(argv)

    @cli_errors
    def run() -> None:
        if args.cmd == "convert":
            print(convert_bin_to_safetensors(args.src, args.out, args.overwrite))
        else:
            ckpt = Checkpoint(args.src)
            for name in ckpt.names:
                i = ckpt.info(name)
                print(f"{name}\t{list(i.shape)}\t{str(i.dtype).replace('torch.', '')}")
            print(f"# {len(ckpt.names)} tensors, {ckpt.total_bytes / 2**20:.1f} MiB, {ckpt.architecture}")

    run()


if __name__ == "__main__":
    main()
