"""Merge methods (SPEC §5): one small module per family, registered by name.

Adding a method = one module here that calls `register(Method(...))` plus one
`conf/method/<name>.yaml`; the registry imports every module of this package.
"""

from dots.merge.methods.base import MergeContext, Method, TensorStream, build_options
from dots.merge.methods.registry import available_methods, get_method, register

__all__ = ["Method", "MergeContext", "TensorStream", "available_methods", "build_options", "get_method", "register"]
