"""Typed options from a config section: a frozen dataclass filled from a mapping, an unknown key
one line naming it and the known ones (the section's values are checked by the class itself)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

from dots.errors import DotsError
from dots.plain import to_plain

T = TypeVar("T")


def field_names(cls: type) -> list[str]:
    """The option names a dataclass takes."""
    return [f.name for f in dataclasses.fields(cls)]


def from_section(cls: type[T], section: Any, where: str, leave_out: tuple[str, ...] = ()) -> T:
    """`cls(**section)` (a DictConfig or mapping, resolved to plain values) without `leave_out`;
    a key `cls` does not take is a one-line DotsError naming `where`'s known options."""
    values = to_plain(section) if section is not None else {}
    if not isinstance(values, Mapping):
        raise DotsError(f"{where} must be a mapping of options, got {values!r}")
    values = {str(k): v for k, v in values.items() if k not in leave_out}
    known = field_names(cls)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise DotsError(f"unknown {where} option(s) {unknown}; known: {sorted(known)}")
    return cls(**values)
