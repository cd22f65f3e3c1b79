"""Environment variables set for a block and restored after it (vLLM reads its process settings,
MLflow its request settings, from os.environ)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

__all__ = ["environment"]


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs; each variable's old value (or absence) after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
