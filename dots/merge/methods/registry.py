"""Name → merge method. Each module of `dots.merge.methods` registers its methods on import."""

from __future__ import annotations

from dots.errors import DotsError
from dots.merge.methods.base import Method

METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"merge method {method.name!r} registered twice")
    METHODS[method.name] = method
    return method


def available_methods() -> list[str]:
    _load_builtin()
    return sorted(METHODS)


def get_method(name: str) -> Method:
    _load_builtin()
    method = METHODS.get(str(name))
    if method is None:
        raise DotsError(f"unknown merge method {name!r} (known: {', '.join(sorted(METHODS))})")
    return method


def _load_builtin() -> None:
    """Import every module of this package once, so that each registers itself."""
    import importlib
    import pkgutil
    from pathlib import Path

    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name not in ("base", "registry"):
            importlib.import_module(f"dots.merge.methods.{info.name}")
