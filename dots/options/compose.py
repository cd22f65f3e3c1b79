"""The packaged Hydra configs (`dots/conf`): resolvers, and composing without a run directory.

Importing this module registers the `${dots_data:REL}` resolver (a file shipped in
dots/data) and the lab's `${lab:STAGE}` (dots.lab).
`compose` is for commands that need a config but no launcher (merge, analyze): it
writes nothing. `check_overrides` reads a command line before Hydra does: `group=name`
with no such config file, or a key the config does not have (`serach.n_trials=3`), ends
in one line naming the closest valid names, instead of Hydra's multi-line report.
"""

from __future__ import annotations

import difflib
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from dots.errors import DotsError
from dots.lab import ensure_trio
from dots.paths import CONF_DIR, DATA_DIR

__all__ = ["check_overrides", "compose"]


def lab_checkpoint(stage: str, *overrides: str) -> str:
    """`${lab:STAGE[,'key=value',...]}`: the directory of the lab trio's `stage` (base, sft, rlvr)
    for conf/lab.yaml with those overrides (shipped, or built on first use)."""
    paths = ensure_trio(list(overrides))
    if stage not in paths:
        raise DotsError(f"${{lab:{stage}}}: the lab has no stage {stage!r} (base, sft, rlvr)")
    return str(paths[stage])


OmegaConf.register_new_resolver("dots_data", lambda rel: str(DATA_DIR / str(rel)), replace=True)
OmegaConf.register_new_resolver("lab", lab_checkpoint, replace=True)


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


# sections whose keys vary (by backbone, method, pool) or are the user's own (sources, models,
# per-benchmark overrides, vLLM keyword arguments): `+key=value` may add to them
OPEN_SECTIONS = ("backbone", "models", "overrides", "engine.extra_args", "method", "pool", "benchmarks")


def _parse(overrides: Sequence[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise DotsError(f"cannot parse the command line: {str(exc).splitlines()[0]}") from None


def _is_group(key: str) -> bool:
    return "." not in key and "/" not in key and (CONF_DIR / key).is_dir()


def _missing_key(cfg: DictConfig, dotted: str) -> tuple[str, list[str]] | None:
    """(the first missing prefix of `dotted`, the closest existing keys at that level), or None
    when the path exists or leaves the checkable part of the config (a value, a list, null).
    Nodes are walked without resolving interpolations (which could build the lab trio)."""
    node: object = cfg
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
            return None
        keys = [str(k) for k in node.keys()]
        if part not in keys:
            prefix = ".".join(parts[:i])
            rest = ".".join(parts[i + 1 :])
            close = difflib.get_close_matches(part, keys, n=3, cutoff=0.6)
            names = [".".join(x for x in (prefix, c, rest) if x) for c in close]
            return ".".join(parts[: i + 1]), names
        node = node._get_node(part)
    return None


def _is_open(dotted: str) -> bool:
    return any(dotted == s or dotted.startswith(s + ".") for s in OPEN_SECTIONS)


def check_overrides(config_name: str, overrides: Sequence[str], multirun: bool = False) -> None:
    """A one-line DotsError for the first override naming an unknown group option or a key the
    composed config does not have (closest valid names suggested); then, when not a sweep,
    composing the whole command line must succeed too. `+key=` may add keys only under
    OPEN_SECTIONS (and where the parent was removed with `~`)."""
    parsed = [o for o in _parse(overrides) if not o.key_or_group.startswith("hydra")]
    choices = []
    for o in parsed:
        if o.package is None and _is_group(o.key_or_group) and not o.is_delete():
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
            check_group_choices([f"{o.key_or_group}={v}" for v in values if v is not None])
            choices.append(f"{o.key_or_group}={values[0]}" if values and values[0] is not None else o.input_line)
        elif o.is_delete():
            choices.append(o.input_line)
    base = compose(config_name, choices, check=False)
    for o in parsed:
        key = o.key_or_group
        if o.is_delete() or (o.package is None and _is_group(key)):
            continue
        missing = _missing_key(base, key)
        if missing is None or ((o.is_add() or o.is_force_add()) and _is_open(key)):
            continue
        first, close = missing
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        if _is_open(key):
            hint += f" (add a new key with +{key}=...)"
        where = f"in the {config_name} config" if first == key else f"({first} is not in the {config_name} config)"
        raise DotsError(f"unknown option {key} {where}{hint}")
    if not multirun:
        compose(config_name, overrides, check=False)


def compose(config_name: str, overrides: Sequence[str], check: bool = True) -> DictConfig:
    """dots/conf/<config_name>.yaml with command-line `overrides`, composed in memory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if check:
        check_overrides(config_name, overrides)
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
