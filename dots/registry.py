"""Named choices, one shape for all of them: merge methods, samplers, engines, trackers, pool kinds.

    SAMPLERS: Registry[Builder] = Registry("sampler")

    @SAMPLERS.register("tpe")
    def tpe(opts, seed, workers): ...

    SAMPLERS.lookup(name)   # the entry, or a one-line DotsError naming the choices

A registry may name `providers`: modules that register entries of theirs when imported (a
higher layer adding a choice to a lower one, as the lab adds the pool kind `lab`). They are
imported the first time the registry is asked for a name it lacks or for its list of names, so
a choice is found whichever module the caller imported first.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Iterator, MutableMapping, Sequence, TypeVar, overload

from dots.errors import DotsError

__all__ = ["Registry", "unknown"]

T = TypeVar("T")


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """`; did you mean X or Y?` naming the choices closest to `name` (empty when none is close)."""
    close = difflib.get_close_matches(name, list(choices), n=3)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def unknown(what: str, name: str, choices: Sequence[str]) -> DotsError:
    """The one-line error of every registry and name check: `unknown <what> 'x'; choose one of a, b;
    did you mean a?` (the choices sorted)."""
    names = sorted(choices)
    return DotsError(f"unknown {what} {name!r}; choose one of {', '.join(names)}{did_you_mean(name, names)}")


class Registry(MutableMapping[str, T]):
    """Entries by name. `register` adds one (as a call or a decorator; a name taken twice is a
    programming error); `lookup` finds one for user input; `names` lists them, sorted. It is a
    mapping too (`registry[name]`, `in`, iteration), so a test may patch an entry."""

    def __init__(self, what: str, providers: Sequence[str] = ()):
        self.what = what  # what an entry is, as an error names it: "merge method", "pool kind"
        self.providers = tuple(providers)
        self._entries: dict[str, T] = {}
        self._provided = not self.providers

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, entry: T) -> T: ...
    def register(self, name: str, entry: T | None = None) -> Any:
        """Add `entry` under `name` and return it; without `entry`, a decorator that does so."""
        if entry is None:
            return lambda decorated: self.register(name, decorated)
        if self._entries.get(name, entry) is not entry:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def _provide(self) -> None:
        """Import the providers once, so that their entries are registered."""
        if not self._provided:
            self._provided = True
            for module in self.providers:
                importlib.import_module(module)

    def lookup(self, name: Any) -> T:
        """The entry called `name`; an unknown name is a one-line DotsError listing the choices
        (and the closest ones)."""
        key = str(name)
        if key not in self._entries:
            self._provide()
        if key not in self._entries:
            raise unknown(self.what, key, self.names())
        return self._entries[key]

    def names(self) -> list[str]:
        """Every name, sorted (providers' included)."""
        self._provide()
        return sorted(self._entries)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._entries)})"
