"""The backbone a command reads (`backbone:` of dots/conf/backbone/*.yaml): its base and sources,
checked once into a `Backbone`, and a composed config resolved into plain data with one-line errors.

merge and analyze resolve the whole config (`resolve_config`) and read the backbone from it; a
resolver's own DotsError (`${lab:...}` building the trio) surfaces as that error's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from dots.errors import DotsError
from dots.plain import to_plain

__all__ = ["Backbone"]


@dataclass(frozen=True)
class Backbone:
    """A base checkpoint and the checkpoints fine-tuned from it (`sources`: key → directory or Hub
    id, in config order); `revision` a Hub revision for all of them; `config_from` which config.json
    an output takes (base or a source key); `prompt` the prompt template (docs/method.md §8); None
    where the section does not set them (a backbone given key by key on the command line)."""

    name: str
    base: str
    sources: Mapping[str, str]
    revision: str | None
    config_from: str | None
    prompt: str | None


def resolve_config(cfg: DictConfig) -> dict:
    """`cfg` as plain data, every interpolation resolved; a failure is one DotsError line (a
    resolver's own DotsError as it is)."""
    from dots.options.compose import check_backbone_sources

    check_backbone_sources(cfg)
    try:
        return to_plain(cfg)
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DotsError):
            raise cause from None
        raise DotsError(f"bad configuration: {str(exc).splitlines()[0]}") from None


def setting(plain: Mapping[str, Any], key: str) -> Any:
    """The value of a top-level option of a resolved config; one line when it was removed (`~key`)."""
    if key not in plain:
        raise DotsError(f"{key} is not set (the command's dots/conf/*.yaml sets it; was it removed with ~{key}?)")
    return plain[key]


def _text(value: Any, what: str, empty_ok: bool = False) -> str:
    """`value` as a non-empty text (a path, a Hub id, a name)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (not empty_ok and str(value) == ""):
        raise DotsError(f"{what} must be a text, got {value!r}")
    return str(value)


def backbone_from(plain: Mapping[str, Any], hint: str) -> Backbone:
    """The checked `backbone` section of a resolved config; `hint` ends the error of a missing
    base or source mapping (how to give one on this command's line)."""
    section = plain.get("backbone")
    if not isinstance(section, Mapping):
        raise DotsError(f"backbone is not set ({hint})")
    if not section.get("base"):
        raise DotsError(f"backbone.base is not set ({hint})")
    sources = section.get("sources") or {}
    if not isinstance(sources, Mapping):
        raise DotsError("backbone.sources must be a mapping of source key -> path or Hub id")
    if "name" not in section:
        raise DotsError("backbone.name is not set (every dots/conf/backbone/*.yaml sets it)")
    optional = {key: section.get(key) for key in ("revision", "config_from", "prompt")}  # None: not set
    return Backbone(
        name=_text(section["name"], "backbone.name"),
        base=_text(section["base"], "backbone.base"),
        sources={str(k): _text(v, f"backbone.sources.{k}") for k, v in sources.items()},
        **{key: None if value is None else _text(value, f"backbone.{key}") for key, value in optional.items()},
    )
