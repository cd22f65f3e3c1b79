r"""`python -m dots.merge`: one baseline merge (docs/method.md §5) from the packaged configs.

    python -m dots.merge method=ties backbone.base=DIR_OR_ID \
        +backbone.sources.sft=DIR +backbone.sources.rlvr=DIR output=DIR [overwrite=true]

The configuration is composed with Hydra's compose API (dots/conf/merge.yaml plus the
command line), so a merge writes nothing but its output. Sources named on the command
line replace the backbone's own (`+backbone.sources.KEY=` may name a key the backbone
already has). A bad input (missing or non-model path, mismatched architecture, shapes
or tensors, NaN/Inf, bad option, unknown method) ends with one `error:` line, exit code 2
and nothing written at the output path. So does an output dots may not write
(`dots.io.destination`): only a new or empty directory, or a previous merge output with
overwrite=true — never a directory holding files dots did not write or the inputs.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig

from dots.errors import DotsError, cli_errors
from dots.merge.executor import merge_checkpoints
from dots.merge.methods import build_options, get_method
from dots.options.merge import MergeOptions, command_line_sources, merge_options

__all__ = ["run_from_config"]


def check_method(options: MergeOptions) -> None:
    """The method's own options checked by its options dataclass (one line naming the option)."""
    build_options(get_method(options.method), options.method_options)


def merge(options: MergeOptions) -> Path:
    """Run one merge from its checked options."""
    backbone = options.backbone
    if backbone.config_from is None:
        raise DotsError("backbone.config_from is not set (base or a source key)")
    return merge_checkpoints(
        base=backbone.base,
        sources=backbone.sources,
        output=options.output,
        method=options.method,
        options=options.method_options,
        weights=options.weights,
        overwrite=options.overwrite,
        revision=backbone.revision,
        config_from=backbone.config_from,
        cache_dir=options.cache_dir,
        calibration=options.calibration,
        max_shard_bytes=options.max_shard_bytes,
        block_entries=options.block_entries,
        config=options.config,
    )


def run_from_config(cfg: DictConfig, keep_sources: Sequence[str] = ()) -> Path:
    """Run one merge from a composed Hydra config (conf/merge.yaml): every option checked first."""
    options = merge_options(cfg, keep_sources)
    check_method(options)
    return merge(options)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry of `python -m dots.merge`: compose the config, merge, print the output path."""
    from dots.options.cli import prepare_command
    from dots.options.compose import compose

    prepare_command(logging.WARNING)
    args = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(args):
        print(__doc__)
        return
    # `+backbone.sources.KEY=` adds a source or replaces one the backbone has (Hydra's `++`)
    overrides = [("+" + a) if re.match(r"^\+backbone\.sources\.", a) else a for a in args]

    @cli_errors
    def run() -> None:
        print(run_from_config(compose("merge", overrides), command_line_sources(overrides)))

    run()


if __name__ == "__main__":
    main()
