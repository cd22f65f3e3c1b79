"""How a merge method declares itself: a function whose parameter names say what it uses.

    @merge_method("linear", blockwise=True)
    def linear(deltas, weights): ...

The executor (`dots.merge.executor`) offers every input of `MERGE_INPUTS` and calls the
function with exactly the ones its signature names (in the spirit of mergekit's
`easy_define`). A method with whole-model needs declares a `first_pass` (offered
`FIRST_PASS_INPUTS`; what it returns is the merge's `stats`), a method whose blocks need
per-tensor facts a `tensor_pass` (offered `TENSOR_PASS_INPUTS`; its return is `part.facts`).
Every method is listed in `dots.merge.methods.registry`.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dots.checks import finite_number, positive_int
from dots.errors import DotsError

__all__ = ["Declared", "NoOptions"]

MERGE_INPUTS = {
    "name": "the tensor's name",
    "base": "θ0's entries, float32 (the executor adds the returned delta to it afterwards)",
    "deltas": "[τ_1..τ_K], τ_i = θ_i − θ0 in float32 (the method may overwrite them)",
    "weights": "the per-source weights w_i (declaring them makes the method accept `weights`)",
    "options": "the method's options dataclass",
    "stats": "what the method's first_pass returned (None without one)",
    "part": "where these entries lie in their tensor (`base.Part`; facts from tensor_pass)",
}
FIRST_PASS_INPUTS = {
    "stream": "a factory of the stream of every merged tensor (`base.TensorStream`, one pass a call)",
    "options": "the method's options dataclass",
    "alignment": "the aligned checkpoints (`dots.io.align.Alignment`: base, sources, renames)",
    "cache_dir": "the cache root (`cache_dir`) or None",
    "calibration": "where calibration queries come from and run (`dots.options.merge.Calibration`)",
}
TENSOR_PASS_INPUTS = {
    "name": "the tensor's name",
    "total": "its number of entries",
    "blocks": "a factory of its row blocks (`base.BlockStream`, one pass a call)",
    "options": "the method's options dataclass",
    "stats": "what the method's first_pass returned",
}


@dataclass(frozen=True)
class Declared:
    """A function and the inputs its parameters name; called with exactly those."""

    fn: Callable[..., Any]
    inputs: tuple[str, ...]

    def __call__(self, available: Mapping[str, Any]) -> Any:
        return self.fn(**{name: available[name] for name in self.inputs})


def declare(fn: Callable[..., Any], offered: Mapping[str, str], role: str) -> Declared:
    """Read the inputs `fn` declares; a parameter that is not offered is a programming error."""
    params = inspect.signature(fn).parameters.values()
    named = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    unknown = [p.name for p in params if p.name not in offered or p.name not in named]
    if unknown:
        raise TypeError(f"{role} {fn.__qualname__} asks for {unknown}; it may take: {', '.join(offered)}")
    return Declared(fn, named)


@dataclass(frozen=True)
class NoOptions:
    """Options of a method that has none."""


@dataclass(frozen=True)
class Method:
    """A merge method: its declared merge function, optional passes and what the executor must know.

    `blockwise`: `merge` accepts row blocks of a tensor (see `base.Part`). `absolute`: `merge`
    returns the merged θ itself rather than a delta (dots_fixed). `min_sources`/`max_sources`:
    how many sources it merges. `weighted` (it declares `weights`) and `reads_deltas` (it
    declares `deltas`; else the executor reads only θ0) follow from its declaration.
    """

    name: str
    options: type
    merge: Declared
    first_pass: Declared | None = None
    tensor_pass: Declared | None = None
    min_sources: int = 1
    max_sources: int | None = None
    blockwise: bool = False
    absolute: bool = False
    summary: str = ""

    @property
    def weighted(self) -> bool:
        return "weights" in self.merge.inputs

    @property
    def reads_deltas(self) -> bool:
        return "deltas" in self.merge.inputs

    def renamed(self, name: str, options: type, summary: str) -> Method:
        """The same method under another name with other default options (ram → ram_plus)."""
        return dataclasses.replace(self, name=name, options=options, summary=summary)


def merge_method(
    name: str,
    options: type = NoOptions,
    *,
    first_pass: Callable[..., Any] | None = None,
    tensor_pass: Callable[..., Any] | None = None,
    min_sources: int = 1,
    max_sources: int | None = None,
    blockwise: bool = False,
    absolute: bool = False,
    summary: str = "",
) -> Callable[[Callable[..., Any]], Method]:
    """Decorator: the function (and its passes) become a `Method` whose inputs are their parameter names."""

    def wrap(fn: Callable[..., Any]) -> Method:
        return Method(
            name=name,
            options=options,
            merge=declare(fn, MERGE_INPUTS, f"merge method {name}"),
            first_pass=declare(first_pass, FIRST_PASS_INPUTS, f"{name}'s first pass") if first_pass else None,
            tensor_pass=declare(tensor_pass, TENSOR_PASS_INPUTS, f"{name}'s tensor pass") if tensor_pass else None,
            min_sources=min_sources,
            max_sources=max_sources,
            blockwise=blockwise,
            absolute=absolute,
            summary=summary,
        )

    return wrap


def build_options(method: Method, values: Mapping[str, Any]) -> Any:
    """Instantiate a method's options dataclass, naming any unknown key; each value has its
    field's type (`float`: a finite number, `int`: a whole number >= 0, `str`: a text)."""
    fields = {f.name: f.type for f in dataclasses.fields(method.options)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise DotsError(
            f"unknown option(s) for method {method.name}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(fields)) or 'none'})"
        )
    typed = dict(values)
    for key, value in values.items():
        what = f"method.{key}"
        if fields[key] == "float":
            typed[key] = finite_number(value, what)
        elif fields[key] == "int":
            typed[key] = positive_int(value, what, minimum=0)
        elif fields[key] == "str" and not isinstance(value, str):
            raise DotsError(f"{what} must be a text, got {value!r}")
    try:
        return method.options(**typed)
    except TypeError as exc:
        raise DotsError(f"bad options for method {method.name}: {exc}") from None
