"""Merge methods: one small module per family, each a `@merge_method` function that
declares the inputs it uses (`declare`), all listed in `registry`."""

from dots.merge.methods.declare import Method, build_options, merge_method
from dots.merge.methods.registry import METHODS, available_methods, get_method

__all__ = ["METHODS", "Method", "available_methods", "build_options", "get_method", "merge_method"]
