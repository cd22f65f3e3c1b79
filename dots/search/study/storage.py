"""Where a search's Optuna study lives and how it is opened: SQLite in the run directory by
default, a journal file or an RDB for several workers (`search.storage`); the configured sampler
seeded per worker and past the trials the study already holds (`sampler=tpe|gp|nsga2|random`,
dots.search.study.samplers)."""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

from dots.errors import DotsError, first_line
from dots.options.search import SearchOptions
from dots.search.study.samplers import build_sampler

__all__ = ["sampler_seed", "open_storage", "open_study", "recover_journal"]

log = logging.getLogger("dots.search")
RECOVERY = (
    "restore it from a copy, or move it away and rerun to start the study again "
    "(its trials are lost; the selection and τ̃ are kept)"
)


def sampler_seed(seed: int, worker: int, n_existing: int) -> int:
    """The sampler seed of this process: the configured seed, apart per worker, and moved on by the
    trials the study already holds, so a resumed, requeued or extra worker does not replay the
    points of the first run (a fresh study, n_existing = 0, keeps the configured sequence)."""
    return int(seed) + 7919 * int(worker) + int(n_existing)


def open_storage(url: str | None, run_dir: Path) -> Any:
    """SQLite in the run dir by default; a `*.journal`/`*.log` path → journal file; else an RDB URL."""
    from optuna.storages import JournalStorage, RDBStorage

    if not url:
        url = f"sqlite:///{(run_dir / 'study.db').resolve()}"
    try:
        if url.endswith((".journal", ".log")) and "://" not in url:
            from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

            Path(url).parent.mkdir(parents=True, exist_ok=True)
            lock = JournalFileSymlinkLock(url)  # the backend's own lock: the recovery excludes its writers
            recover_journal(Path(url), lock)
            return JournalStorage(JournalFileBackend(url, lock_obj=lock))
        if url.startswith("sqlite"):
            check_sqlite(url)
            return RDBStorage(url)
        return _database(url)
    except DotsError:
        raise
    except Exception as exc:
        raise storage_error(url, exc) from None


def recover_journal(path: Path, lock: Any) -> None:
    """A journal whose last record a crash cut (no line break, or a line that is no JSON object)
    loses that record: the file is truncated before it, under the journal's lock, and one log line
    says so (a record whole but for its line break gets the break). Optuna would skip the cut
    record, append after it, and fail on every later read. A damaged record followed by others is
    refused in one line, before anything is appended."""
    if not path.exists() or path.stat().st_size == 0:
        return
    lock.acquire()
    try:
        with open(path, "r+b") as fh:
            offset, damaged = 0, None
            for number, line in enumerate(fh, 1):
                if damaged is not None:
                    raise DotsError(
                        f"the study journal {path} is damaged at line {damaged[0]} (byte {damaged[1]}), before "
                        f"other records: {damaged[2]}; {RECOVERY}"
                    )
                problem = _record_problem(line)
                if problem is not None:
                    damaged = (number, offset, problem, line)
                offset += len(line)
            if damaged is None:
                return
            number, start, problem, line = damaged
            if problem == "no line break at its end":
                fh.seek(0, 2)
                fh.write(b"\n")
                os.fsync(fh.fileno())
                log.warning("the study journal %s: its last record had lost its line break; added", path)
                return
            fh.truncate(start)
            os.fsync(fh.fileno())
            log.warning(
                "the study journal %s: its last record (line %d, %d bytes) is damaged (%s), as a crash mid-write "
                "leaves it; dropped, the study resumes from the %d records before it",
                path,
                number,
                len(line),
                problem,
                number - 1,
            )
    finally:
        lock.release()


def check_sqlite(url: str) -> None:
    """An existing SQLite study file passes SQLite's integrity check before the study is opened
    (a process killed mid-write is rolled back by SQLite's own journal at this first read; a file
    cut or scrambled otherwise may open and take new trials on top of the damage)."""
    import sqlite3

    path = Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with sqlite3.connect(path) as db:
            verdict = str(db.execute("PRAGMA integrity_check").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        verdict = first_line(exc)
    if verdict != "ok":
        raise DotsError(f"the study file {path} is damaged ({' '.join(verdict.split())[:200]}); {RECOVERY}")


def _record_problem(line: bytes) -> str | None:
    """Why one journal line is not a whole record (None: it is one)."""
    try:
        record = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return f"not JSON: {first_line(exc)}"
    if not isinstance(record, dict):
        return "not a JSON object"
    return None if line.endswith(b"\n") else "no line break at its end"


def _database(url: str, tries: int = 5) -> Any:
    """An RDB storage on a database server. Workers started together all create Optuna's tables on an
    empty database; the losers of that race see "already exists" or a duplicate key, and open it again."""
    from optuna.storages import RDBStorage

    for attempt in range(tries):
        try:
            return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except Exception as exc:
            lost_race = any(s in str(exc) for s in ("already exists", "Duplicate entry", "duplicate key"))
            if not lost_race or attempt == tries - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def storage_error(url: str, exc: BaseException) -> DotsError:
    """One line for a storage that fails: a damaged SQLite file says so and how to recover."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if url.startswith("sqlite:///") and ("malformed" in first or "not a database" in first):
        path = url[len("sqlite:///") :]
        return DotsError(f"the study file {path} is damaged ({first.split(') ')[-1]}); {RECOVERY}")
    return DotsError(f"cannot open the study storage {url!r}: {first}")


def open_study(options: SearchOptions, storage: Any, study_name: str) -> Any:
    """Create or load the study: two objectives, the configured sampler (`sampler=tpe|gp|
    nsga2|random`, dots.search.study.samplers) seeded per worker and past the trials the study
    already holds (`sampler_seed`), so a resumed study does not replay its sequence."""
    import optuna

    try:  # a damaged SQLite file may open and fail at its first read
        study = optuna.create_study(
            study_name=study_name,
            storage=storage,
            directions=["maximize", "minimize"],
            load_if_exists=True,
        )
        n_existing = len(study.get_trials(deepcopy=False))
    except Exception as exc:
        raise storage_error(str(getattr(getattr(storage, "engine", None), "url", "") or ""), exc) from None
    seed = sampler_seed(options.seed, options.search.worker, n_existing)
    study.sampler = build_sampler(options.sampler, seed, options.search.workers)
    study.set_user_attr("sampler", options.sampler.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["consistency", "perplexity"])
    return study
