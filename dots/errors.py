"""User-facing errors: one line, no traceback, non-zero exit."""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class DotsError(Exception):
    """An error caused by the user's input; printed as one line by the CLIs."""


def cli_errors(fn: F) -> F:
    """Wrap a CLI entry so a DotsError prints `error: ...` and exits with code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DotsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
