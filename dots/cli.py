"""What every `python -m dots.<verb>` does before its work."""

from __future__ import annotations

import logging

from dots.memory import reuse_freed_memory
from dots.signals import exit_on_sigterm


def prepare_command(log_level: int = logging.INFO) -> None:
    """dots' own log lines at `log_level`, glibc keeping freed memory for the next tensor
    (`dots.memory`), and SIGTERM turned into a clean exit (`dots.signals`)."""
    logging.getLogger("dots").setLevel(log_level)
    reuse_freed_memory()
    exit_on_sigterm()
