"""Checkpoint I/O: lazy reader (local dir or Hub id), atomic sharded writer, alignment of a
base with its fine-tunes."""

from dots.io.align import Alignment, align, config_differences
from dots.io.checkpoint import Checkpoint
from dots.io.safetensors import TensorInfo
from dots.io.writer import CheckpointWriter

__all__ = ["Alignment", "Checkpoint", "CheckpointWriter", "TensorInfo", "align", "config_differences"]
