"""User-facing errors: one line, no traceback, non-zero exit."""

from __future__ import annotations

import functools
import sys
from typing import Callable, NoReturn, TypeVar

__all__ = ["DotsError", "argument_error", "cli_errors", "first_line", "one_line"]

F = TypeVar("F", bound=Callable)


class DotsError(Exception):
    """An error caused by the user's input; printed as one line by the CLIs."""


def one_line(text: str) -> str:
    """`text` on one line (a file name or value with a line break in it must not split the error)."""
    return " ".join(part.strip() for part in text.splitlines()) or text


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cli_errors(fn: F) -> F:
    """Wrap a CLI entry so a DotsError (or a config value OmegaConf cannot give: a missing `???`,
    a failed interpolation) prints one `error: ...` line and exits with code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DotsError as exc:
            print(f"error: {one_line(str(exc))}", file=sys.stderr)
            sys.exit(2)
        except Exception as exc:
            from omegaconf.errors import OmegaConfBaseException

            if not isinstance(exc, OmegaConfBaseException):
                raise
            cause = exc.__cause__ or exc.__context__  # a resolver's own DotsError (${lab:...})
            message = str(cause) if isinstance(cause, DotsError) else f"bad configuration: {str(exc).splitlines()[0]}"
            print(f"error: {one_line(message)}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def argument_error(message: str) -> NoReturn:
    """argparse's `error` as one `error:` line and exit code 2 (set `parser.error = argument_error`):
    its own prints the usage over several lines."""
    raise DotsError(message)
