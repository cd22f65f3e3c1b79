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

from dots.checks import positive_int
from dots.errors import DotsError, cli_errors
from dots.merge.executor import DEFAULT_MAX_SHARD_BYTES, merge_checkpoints
from dots.plain import to_plain
from dots.vectors.deltas import BLOCK_ENTRIES

SOURCE_OVERRIDE = re.compile(r"^(\+{0,2})backbone\.sources\.([^=]+)=")


def command_line_sources(overrides: Sequence[str]) -> list[str]:
    """Source keys given as `[+|++]backbone.sources.KEY=PATH` on the command line."""
    return [m.group(2) for m in map(SOURCE_OVERRIDE.match, overrides) if m]


def _resolved(cfg, keep_sources: Sequence[str]) -> dict:
    """The config as plain data; sources given on the command line replace the backbone's
    own (dropped before resolving, so e.g. the lab's `${lab:sft}` is never built)."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from dots.options.compose import check_backbone_sources

    if OmegaConf.is_missing(cfg, "output"):
        raise DotsError("no output directory given (add output=DIR)")
    if keep_sources and "backbone" in cfg and cfg.backbone.get("sources") is not None:
        with open_dict(cfg):
            for key in list(cfg.backbone.sources):
                if key not in keep_sources:
                    del cfg.backbone.sources[key]
    check_backbone_sources(cfg)
    try:
        return to_plain(cfg)
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DotsError):
            raise cause from None
        raise DotsError(f"bad configuration: {str(exc).splitlines()[0]}") from None


def run_from_config(cfg, keep_sources: Sequence[str] = ()) -> Path:
    """Run one merge from a composed Hydra config (conf/merge.yaml)."""
    container = _resolved(cfg, keep_sources)
    backbone = container.get("backbone") or {}
    method_cfg = dict(container.get("method") or {})
    name = method_cfg.pop("name", None)
    if not name:
        raise DotsError("the method config has no name (pick one with method=NAME)")
    weights = method_cfg.pop("weights", None)
    if not container.get("output"):
        raise DotsError("no output directory given (add output=DIR)")
    if not backbone.get("base"):
        raise DotsError("no base model given (add backbone.base=DIR_OR_ID)")
    revision = backbone.get("revision")
    return merge_checkpoints(
        base=backbone["base"],
        sources=backbone.get("sources") or {},
        output=container["output"],
        method=name,
        options=method_cfg,
        weights=weights,
        overwrite=bool(container.get("overwrite", False)),
        revision=revision if isinstance(revision, str) else None,
        config_from=str(backbone.get("config_from") or "base"),
        cache_dir=container.get("cache_dir"),
        max_shard_bytes=positive_int(
            _or_default(container, "max_shard_bytes", DEFAULT_MAX_SHARD_BYTES), "max_shard_bytes"
        ),
        block_entries=positive_int(container.get("block_entries", BLOCK_ENTRIES), "block_entries"),
        config=container,
    )


def _or_default(container: dict, key: str, default: int) -> object:
    """The configured value, the default for null (0 is a value, to be refused)."""
    value = container.get(key)
    return default if value is None else value


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
