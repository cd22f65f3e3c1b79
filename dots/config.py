"""The packaged Hydra configs (`dots/conf`): resolvers, and composing without a run directory.

Importing this module registers the `${dots_data:REL}` resolver (a file shipped in
dots/data) and the lab's `${lab:STAGE}` (dots.lab).
`compose` is for commands that need a config but no launcher (merge, analyze): it
writes nothing. `check_group_choices` turns `group=name` with no such config file into
one line naming the closest choices, instead of Hydra's multi-line report.
"""

from __future__ import annotations

import difflib
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

import dots.lab  # noqa: F401  (registers the ${lab:...} resolver)
from dots.errors import DotsError
from dots.paths import CONF_DIR, DATA_DIR

OmegaConf.register_new_resolver("dots_data", lambda rel: str(DATA_DIR / str(rel)), replace=True)


def group_choices(group: str) -> list[str]:
    """The options of a config group (the yaml files of dots/conf/<group>/)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(overrides: Sequence[str]) -> None:
    """A DotsError for the first `group=choice` override whose group has no such option."""
    for item in overrides:
        key, sep, value = item.lstrip("+~").partition("=")
        if not sep or "." in key or not (CONF_DIR / key).is_dir() or value in ("null", ""):
            continue
        if not (CONF_DIR / key / f"{value}.yaml").exists():
            known = group_choices(key)
            close = difflib.get_close_matches(value, known, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise DotsError(f"unknown {key} {value!r} (choose one of {', '.join(known)}){hint}")


def compose(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """dots/conf/<config_name>.yaml with command-line `overrides`, composed in memory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_group_choices(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise DotsError(f"bad configuration: {str(exc).splitlines()[0]}") from None


def check_backbone_sources(cfg: DictConfig) -> None:
    """Stop in one line when a backbone leaves a source checkpoint unset (`???`: the paper
    gives no id for it), naming each value to pass and the backbone's `sources_note`."""
    backbone = cfg.get("backbone")
    sources = backbone.get("sources") if backbone is not None else None
    if not isinstance(sources, DictConfig):
        return
    missing = [str(k) for k in sources if OmegaConf.is_missing(sources, k)]
    if missing:
        note = backbone.get("sources_note") or "no checkpoint is set for these sources"
        passes = " ".join(f"backbone.sources.{k}=<Hub id or directory>" for k in missing)
        raise DotsError(f"backbone {backbone.get('name', '?')}: {note}; pass {passes}")
