"""Where dots may write: dots deletes only what it wrote (docs/outputs.md).

Every directory dots writes carries a record, `.dots-output.json`: the kind of output, the
dots version, the command line, the time and the files dots wrote there (with their digests).
`claim` is called by each writer before any work: a destination may be new, empty, or a
previous dots output of the same kind (replaced only with overwrite=true, or by a rerun of
the same search for the outputs of its own run directory). Anything else — `/`, home, a
directory that is, holds or lies in an input, a file dots did not write, another kind's
output — is one DotsError line. `Destination.install` (the commit) removes only listed files.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from dots.errors import DotsError
from dots.io.commit import claim_temp, install_dir, is_temporary, release, sweep, sweep_inside
from dots.io.contents import edited_file, hashed_names, resolved
from dots.io.records import RECORD, discard_output, files_under, new_record, read_record, seal, write_record

__all__ = ["Destination", "RECORD", "claim", "input_paths", "read_record", "seal"]  # (the record: dots.io.records)

log = logging.getLogger("dots.io")

# outputs that grow in place (a rerun resumes them): their record lists no files and dots
# writes only its own file names there; every other kind is replaced whole
GROWING = ("search-run", "evaluate", "analyze", "taskvec-cache", "fisher-cache")
# the option that replaces a previous output of each kind replaced whole
OVERWRITE = {"merge": "overwrite=true", "export": "export.overwrite=true", "convert": "--overwrite"}


def _entries(directory: Path) -> list[Path]:
    """The entries of `directory`, files before folders (the file is what a message names)."""
    try:
        return sorted(directory.iterdir(), key=lambda p: (p.is_dir() and not p.is_symlink(), p.name))
    except OSError:
        return []


def _example(directory: Path, own: Callable[[str], bool] | None = None, depth: int = 3) -> str:
    """One entry of `directory` (not one `own` recognises) to name in a message: a file where
    there is one near the top, else a folder."""
    entries = [e for e in _entries(directory) if own is None or not own(e.name)]
    if not entries:
        return ""
    first = entries[0]
    if depth and first.is_dir() and not first.is_symlink():
        return _example(first, None, depth - 1) or str(first)
    return str(first)


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


@dataclass
class Destination:
    """A directory a writer has claimed (`claim`); `path` is resolved (symlinks followed)."""

    path: Path
    kind: str
    overwrite: bool = False
    inputs: tuple[Path, ...] = ()
    run_dir: Path | None = None
    identity: str | None = None  # what the output is made of (a search run's, a merge's), in its record
    given: str = field(default="", repr=False)
    own: Callable[[str], bool] | None = field(default=None, repr=False)

    def refuse(self, reason: str, example: str | Path = "") -> DotsError:
        shown = self.given if self.given and self.given != str(self.path) else ""
        where = f"{self.path}" + (f" ({shown})" if shown else "")
        named = f" (e.g. {example})" if example else ""
        return DotsError(
            f"refusing to write the {self.kind} output into {where}: {reason}{named}; "
            "dots deletes only what it wrote: choose a new or empty directory"
        )

    def check(self) -> dict | None:
        """Raise a DotsError unless dots may write here now; the old record when replacing."""
        path = self.path
        if path == Path(path.anchor):
            raise self.refuse("it is the filesystem root", _example(path))
        if path == Path.home().resolve():
            raise self.refuse("it is your home directory", _example(path))
        for source in self.inputs:
            if path == source:
                raise self.refuse(f"it is the input checkpoint {source}", _example(source))
            if _inside(source, path):
                raise self.refuse(f"it holds the input checkpoint {source}", _example(source))
            if _inside(path, source):
                raise self.refuse(f"it lies inside the input checkpoint {source}", _example(source))
        if not os.path.lexists(path):
            return None
        if not path.is_dir():
            raise self.refuse("it exists and is not a directory", path)
        record = read_record(path)
        if record is None:  # empty, or (a cache of an older dots) only entries `own` recognises
            mine = self.own or (lambda n: False)  # (and dots' temporaries: a dead writer's are swept)
            example = _example(path, lambda n: n.startswith(RECORD) or is_temporary(n) or mine(n))
            if example:
                raise self.refuse("it holds files dots did not write", example)
            return None
        if record["kind"] != self.kind:
            kind = record["kind"]
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise self.refuse(f"it is a dots {kind} output, not {article} {self.kind} one", path / RECORD)
        if self.kind in GROWING:
            known = record.get("identity")
            if self.identity and known and known != self.identity and not self.overwrite:
                raise DotsError(
                    f"{path} holds the results of another search (identity {known}; this search is "
                    f"{self.identity}): pass replace_run=true to replace them, or choose another run_dir"
                )
            return record
        listed = set(record.get("files") or ()) | {RECORD}
        foreign = [f for f in files_under(path) if f not in listed]
        if foreign:
            raise self.refuse("it holds files dots did not write", path / foreign[0])
        same_run = self.run_dir is not None and record.get("run_dir") == str(self.run_dir)
        same_run |= self.identity is not None and record.get("identity") == self.identity  # this command's own
        option = OVERWRITE.get(self.kind, "overwrite=true")
        if not (self.overwrite or same_run):
            raise DotsError(f"output exists: {path} is a previous dots {self.kind} output (pass {option} to replace)")
        edited = None if self.overwrite else edited_file(path, record)
        if edited:
            raise DotsError(
                f"refusing to replace {path / edited}: it changed since dots wrote it (move it away, or pass {option})"
            )
        return record

    def create(self) -> Path:
        """Make the directory of a growing output and record it (kept when already there); what
        dead writers left in it is removed (`dots.io.commit.sweep_inside`)."""
        self.check()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            sweep_inside(self.path, discard_output)
            record = read_record(self.path)
            if record is None or (self.identity and record.get("identity") != self.identity):
                mine = {"identity": self.identity} if self.identity else {}
                write_record(self.path, {**new_record(self.kind, None, self.run_dir), **mine})
        except OSError as exc:  # a full or read-only disk: one line
            raise DotsError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        return self.path

    def begin(self) -> Path:
        """A new temporary folder beside the output, for its new version (`install`), once what
        dead writers left beside it is removed or finished (`dots.io.commit.sweep`)."""
        sweep(self.path, discard_output)
        return claim_temp(self.path)

    def install(self, finished: Path) -> Path:
        """Switch the finished output `finished` (from `begin`) in: sealed with its record, the
        destination checked again, then one rename or atomic exchange (`dots.io.commit.install_dir`);
        of the old version dots removes exactly the files its record lists, never anything else."""
        seal(finished, self.kind, self.run_dir, self.identity)
        self.check()
        install_dir(finished, self.path, discard_output)
        release(finished)
        return self.path


# entries of the caches an older dots wrote without a record: hash-named (`dots.keys.stable_hash`)
OLDER_CACHES = {"taskvec-cache": hashed_names(20), "fisher-cache": hashed_names(24)}


def claim(
    directory: str | os.PathLike,
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike] = (),
    run_dir: str | os.PathLike | None = None,
    identity: str | None = None,
) -> Destination:
    """Check, before any work, that dots may write a `kind` output at `directory` (see the
    module's docstring); `inputs` are the checkpoints the command reads, `run_dir` the search
    run whose own output this is, `identity` a search run's (another's is refused unless
    `overwrite`). Raises a one-line DotsError; writes nothing."""
    given = str(directory)
    dest = Destination(
        resolved(directory, f"the {kind} output directory"),
        kind,
        bool(overwrite),
        tuple(resolved(p, "the input") for p in inputs),
        resolved(run_dir, "run_dir") if run_dir is not None else None,
        identity,
        given,
        OLDER_CACHES.get(kind),
    )
    dest.check()
    return dest


def input_paths(checkpoints: Mapping[str, object] | Iterable[object]) -> list[Path]:
    """The local directories of checkpoints (`Checkpoint` objects or paths) for `claim`'s inputs."""
    items = checkpoints.values() if isinstance(checkpoints, Mapping) else checkpoints
    return [Path(getattr(c, "path", c)) for c in items]  # type: ignore[arg-type]
