"""Every merge method, by name: the one list `dots.merge` picks from (`method=NAME`).

Adding a method = a module of this package with a `@merge_method` function, its line
here, and a `dots/conf/method/<name>.yaml`.
"""

from __future__ import annotations

from dots.merge.methods.dare import dare
from dots.merge.methods.declare import Method
from dots.merge.methods.dots_fixed import dots_fixed
from dots.merge.methods.linear import linear
from dots.merge.methods.ram import ram, ram_plus
from dots.merge.methods.sar import sar
from dots.merge.methods.task_arithmetic import task_arithmetic
from dots.merge.methods.ties import ties
from dots.registry import Registry

METHODS: Registry[Method] = Registry("merge method")
for _method in (linear, task_arithmetic, ties, dare, ram, ram_plus, sar, dots_fixed):
    METHODS.register(_method.name, _method)


def available_methods() -> list[str]:
    """The names of every merge method, sorted."""
    return METHODS.names()


def get_method(name: str) -> Method:
    """The method called `name`; an unknown name is a one-line error listing the known ones."""
    return METHODS.lookup(name)
