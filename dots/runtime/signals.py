"""SIGTERM (scancel, a job time limit, `kill`, `timeout`) as a clean exit.

A long command turns SIGTERM into SystemExit(143) in its main thread, so `finally`
blocks run: engines close and vLLM's engine-core process goes with them instead of
being orphaned. Bookkeeping that must not be cut in half runs inside `sigterm_deferred`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any, Iterator

__all__ = ["SIGTERM_EXIT_CODE", "exit_on_sigterm", "sigterm_deferred"]

log = logging.getLogger(__name__)

SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


class _Sigterm:
    deferring = 0  # depth of sigterm_deferred blocks in the main thread
    pending = False  # a SIGTERM arrived while deferring


def exit_on_sigterm() -> bool:
    """Turn SIGTERM (scancel, a job time limit, `kill`, `timeout`) into SystemExit(143) in
    the main thread, so `finally` blocks run: the engine closes and vLLM's engine-core
    process goes with it instead of being orphaned. Inside `sigterm_deferred` the exit waits
    for the block's end. True if installed (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return False

    def _exit(signum: int, frame: Any) -> None:
        log.warning("SIGTERM: stopping (finished work is kept; rerun the same command to resume)")
        if _Sigterm.deferring:
            _Sigterm.pending = True
            return
        raise SystemExit(SIGTERM_EXIT_CODE)

    signal.signal(signal.SIGTERM, _exit)
    return True


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """Hold a SIGTERM that arrives inside the block until the block ends, so that study
    bookkeeping (ask and suggest, tell) is never cut in half: a trial is either left with
    all its coefficients or not asked at all."""
    _Sigterm.deferring += 1
    try:
        yield
    finally:
        _Sigterm.deferring -= 1
    if not _Sigterm.deferring and _Sigterm.pending:  # (an exception in flight keeps it pending)
        _Sigterm.pending = False
        raise SystemExit(SIGTERM_EXIT_CODE)
