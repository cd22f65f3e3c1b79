"""A search is a list of stages; "skip when done, resume when killed" is written here once.

Each stage names its output in the run directory and the inputs it depends on (its
key). After a stage finishes, `<run_dir>/.stages/<name>.json` records the hash of that
key; on a rerun a stage whose record matches and whose output exists is not run again:
its result is loaded from the output. Exclusive stages run under a POSIX lock (the
kernel releases it if the holder dies), so of several workers on one run directory one
does the work and the others wait and load it; the study is shared, not exclusive.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dots.io.commit import write_atomic
from dots.keys import stable_hash
from dots.runtime.locks import run_once_lock

log = logging.getLogger(__name__)

RECORDS = ".stages"


@dataclass(frozen=True)
class Stage:
    """One step of a run. `key(run)` is what its result depends on; `build(run)` does the work
    and writes `output` (a path relative to the run directory); `load(run)` reads a finished
    output back (None: always build — for stages that resume by themselves, like the study)."""

    name: str
    output: str
    key: Callable[[Any], Any]
    build: Callable[[Any], Any]
    load: Callable[[Any], Any] | None = None
    exclusive: bool = True


def _record(run_dir: Path, stage: Stage) -> Path:
    return run_dir / RECORDS / f"{stage.name}.json"


def is_done(run_dir: Path, stage: Stage, key: str) -> bool:
    """The stage finished with this key and its output is still there."""
    try:
        recorded = json.loads(_record(run_dir, stage).read_text()).get("key")
    except (OSError, ValueError):
        return False
    return recorded == key and (run_dir / stage.output).exists()


def run_stage(run_dir: Path, stage: Stage, run: Any) -> Any:
    """The stage's result: loaded when done with the same inputs, else built and recorded."""
    key = stable_hash(stage.key(run))
    lock = run_once_lock(run_dir / f".{stage.name}.lock") if stage.exclusive else contextlib.nullcontext()
    with lock:
        if stage.load is not None and is_done(run_dir, stage, key):
            log.info("%s is up to date (%s)", stage.name, run_dir / stage.output)
            return stage.load(run)
        result = stage.build(run)
        record = _record(run_dir, stage)
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps({"key": key, "output": stage.output}))  # after the output: done
        return result


def run_stages(run_dir: Path, stages: list[Stage], run: Any) -> None:
    """Run `stages` in order; each stage's result is set on `run.results` under its name."""
    for stage in stages:
        setattr(run.results, stage.name, run_stage(run_dir, stage, run))
