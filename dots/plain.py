"""OmegaConf containers → plain Python data (dicts, lists, scalars), resolved."""

from __future__ import annotations

from typing import Any

__all__ = ["to_plain"]


def to_plain(value: Any, resolve: bool = True) -> Any:
    """A DictConfig / ListConfig as plain containers (interpolations resolved unless
    `resolve=False`); anything else is returned as it is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=resolve)
    return value
