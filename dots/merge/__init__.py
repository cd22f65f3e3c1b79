"""The classic merge methods (docs/method.md §5) on a streaming executor: `python -m dots.merge`."""

from dots.merge.executor import merge_checkpoints

__all__ = ["merge_checkpoints"]
