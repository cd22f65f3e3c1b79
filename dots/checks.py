"""Checks of option values, each a one-line DotsError naming the option: written once for
every command (search, merge methods, sparsify, engines)."""

from __future__ import annotations

import math
from typing import Any, Iterable

from dots.errors import DotsError

__all__ = [
    "check_choice",
    "check_density",
    "check_flag",
    "check_probability",
    "finite_number",
    "number_in",
    "positive_int",
    "whole_number",
]


def _as_int(value: Any) -> int | None:
    """`value` as an int when it is a whole number (an int, a float like 3.0, a text like "3")."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    except ValueError:  # more digits than Python converts
        pass
    return None


def positive_int(value: Any, what: str, minimum: int = 1) -> int:
    """`value` as an int >= `minimum` (a whole number; "3" from a command line is fine; never
    a bool, nan or ±inf)."""
    number = _as_int(value)
    if number is None:
        raise DotsError(f"{what} must be an integer >= {minimum}, got {value!r}")
    if number < minimum:
        raise DotsError(f"{what} must be >= {minimum}, got {number}")
    return number


def whole_number(value: Any, what: str) -> int:
    """`value` as an int of any sign (a seed)."""
    number = _as_int(value)
    if number is None:
        raise DotsError(f"{what} must be an integer, got {value!r}")
    return number


def finite_number(value: Any, what: str) -> float:
    """`value` as a finite float (an int, a float or a number's text; never a bool, nan or ±inf)."""
    try:
        number = float(value) if not isinstance(value, bool) and isinstance(value, (int, float, str)) else None
    except (ValueError, OverflowError):
        number = None
    if number is None or not math.isfinite(number):
        raise DotsError(f"{what} must be a finite number, got {value!r}")
    return number


def number_in(value: Any, what: str, low: float, high: float, low_open: bool = False, high_open: bool = False) -> float:
    """`value` as a finite float in the interval [low, high] (ends opened by low_open / high_open)."""
    opening = "(" if low_open or low == -math.inf else "["
    closing = ")" if high_open or high == math.inf else "]"
    interval = f"{opening}{low:g}, {high:g}{closing}"
    try:
        number = finite_number(value, what)
    except DotsError:
        raise DotsError(f"{what} must be a finite number in {interval}, got {value!r}") from None
    above = number > low if low_open else number >= low
    below = number < high if high_open else number <= high
    if not (above and below):
        raise DotsError(f"{what} must be in {interval}, got {value}")
    return number


def check_density(density: Any, what: str = "density") -> float:
    """A share of entries kept: (0, 1]."""
    return number_in(density, what, 0.0, 1.0, low_open=True)


def check_probability(p: Any, what: str = "p") -> float:
    """A drop probability: [0, 1) (p = 1 would drop everything and rescale by 1/0)."""
    return number_in(p, f"drop probability {what}", 0.0, 1.0, high_open=True)


def check_choice(value: Any, choices: Iterable[str], what: str) -> str:
    """`value` when it is one of `choices`."""
    choices = tuple(choices)
    if value not in choices:
        raise DotsError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def check_flag(value: Any, what: str) -> bool:
    """`value` when it is a bool (a command line's `true`/`false`; never a text or a number)."""
    if not isinstance(value, bool):
        raise DotsError(f"{what} must be true or false, got {value!r}")
    return value
