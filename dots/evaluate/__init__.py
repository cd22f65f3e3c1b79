"""Evaluation (docs/method.md §7): models × benchmarks on one live engine, `python -m dots.evaluate`."""
