"""`python -m dots.merge`'s options (dots/conf/merge.yaml + the command line), checked once into a
`MergeOptions`: every value has its type and range here, with a one-line error naming it.

The method's own options (`method.density`, ...) are kept as given: the method's options dataclass
(`dots.merge.methods.build_options`) checks them at the command's entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from dots.checks import check_flag, positive_int
from dots.errors import DotsError
from dots.options.backbone import Backbone, backbone_from, resolve_config, setting

__all__ = ["Calibration", "MergeOptions", "command_line_sources", "merge_options"]

SOURCE_OVERRIDE = re.compile(r"^(\+{0,2})backbone\.sources\.([^=]+)=")


@dataclass(frozen=True)
class Calibration:
    """SAR's Fisher calibration queries: from `pool` (conf/pool/*.yaml as plain data; None: the
    built-in arithmetic set), written with the `prompt` template (docs/method.md §8; `chat` takes
    the chat template of the `tokenizer` checkpoint), run on `device` (auto: cuda when available)."""

    pool: Mapping[str, Any] | None
    prompt: str | None
    tokenizer: str
    device: str


@dataclass(frozen=True)
class MergeOptions:
    """One merge: `method` (a conf/method name) with its `method_options` and per-source `weights`
    (None, a number, a list in source order or a mapping by key) of the backbone's sources into
    its base, written to `output`; `config` is the resolved configuration, which the model card
    records."""

    backbone: Backbone
    output: Path
    overwrite: bool
    method: str
    method_options: Mapping[str, Any]
    weights: Any
    cache_dir: str | None
    calibration: Calibration
    max_shard_bytes: int
    block_entries: int
    config: Mapping[str, Any]


def command_line_sources(overrides: Sequence[str]) -> list[str]:
    """Source keys given as `[+|++]backbone.sources.KEY=PATH` on the command line."""
    return [m.group(2) for m in map(SOURCE_OVERRIDE.match, overrides) if m]


def merge_options(cfg: DictConfig, keep_sources: Sequence[str] = ()) -> MergeOptions:
    """The checked options of a composed conf/merge.yaml. Sources named on the command line
    (`keep_sources`) replace the backbone's own: the others are dropped before resolving, so
    e.g. the lab's `${lab:sft}` is never built."""
    if OmegaConf.is_missing(cfg, "output"):
        raise DotsError("no output directory given (add output=DIR)")
    if keep_sources and "backbone" in cfg and cfg.backbone.get("sources") is not None:
        with open_dict(cfg):
            for key in list(cfg.backbone.sources):
                if key not in keep_sources:
                    del cfg.backbone.sources[key]
    plain = resolve_config(cfg)
    method = dict(setting(plain, "method") or {})
    name = method.pop("name", None)
    if not name:
        raise DotsError("the method config has no name (pick one with method=NAME)")
    if not setting(plain, "output"):
        raise DotsError("no output directory given (add output=DIR)")
    cache_dir, device = setting(plain, "cache_dir"), setting(plain, "device")
    pool = plain.get("pool")  # absent: no pool group chosen (pool: null in the defaults list)
    if cache_dir is not None and not isinstance(cache_dir, str):
        raise DotsError(f"cache_dir must be a directory, got {cache_dir!r}")
    if not isinstance(device, str) or not device:
        raise DotsError(f"device must be auto, cpu or a torch device such as cuda:0, got {device!r}")
    if pool is not None and not isinstance(pool, Mapping):
        raise DotsError(f"pool must be a pool config (pool=NAME), got {pool!r}")
    backbone = backbone_from(plain, "add backbone.base=DIR_OR_ID")
    return MergeOptions(
        backbone=backbone,
        output=Path(str(setting(plain, "output"))),
        overwrite=check_flag(setting(plain, "overwrite"), "overwrite"),
        method=str(name),
        weights=method.pop("weights", None),
        method_options=method,
        cache_dir=cache_dir,
        calibration=Calibration(pool=pool, prompt=backbone.prompt, tokenizer=backbone.base, device=device),
        max_shard_bytes=positive_int(setting(plain, "max_shard_bytes"), "max_shard_bytes"),
        block_entries=positive_int(setting(plain, "block_entries"), "block_entries"),
        config=plain,
    )
