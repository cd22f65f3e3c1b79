"""A study journal (`search.storage=PATH.journal`) whose last record a crash cut: the record is
dropped, said in one line, and the study resumes; a damaged record before others is one `error:`
line, the journal untouched (issue #48). Optuna alone skips a cut last record, appends after it,
and fails on every later read (JSONDecodeError)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, SMALL_LAB, cli_env, run

from dots.errors import DotsError
from dots.search.study.storage import open_storage


def load(journal: Path):
    import optuna

    storage = open_storage(str(journal), journal.parent)
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def trials(journal: Path) -> list[tuple]:
    """(number, state, params, values) of every trial in the journal's study."""
    return [(t.number, t.state.name, t.params, t.values) for t in load(journal).get_trials(deepcopy=False)]


def _study(journal: Path, n: int) -> None:
    """A real Optuna study of `n` trials in `journal`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(str(journal), journal.parent)
    study = optuna.create_study(study_name="s", storage=storage, load_if_exists=True)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=n)


def test_a_cut_at_every_byte_of_the_last_record_is_dropped_and_the_study_resumes(tmp_path, caplog):
    journal = tmp_path / "study.journal"
    _study(journal, 3)
    whole, full = journal.read_bytes(), trials(journal)
    lines = whole.splitlines(keepends=True)
    before = whole[: len(whole) - len(lines[-1])]
    (tmp_path / "before.journal").write_bytes(before)
    expected = trials(tmp_path / "before.journal")  # the study without its last record
    for cut in range(len(before) + 1, len(whole)):
        journal.write_bytes(whole[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dots.search"):
            got = trials(journal)
        if cut == len(whole) - 1:  # the record whole but for its line break: kept
            assert journal.read_bytes() == whole and got == full
            assert [r.getMessage() for r in caplog.records] == [
                f"the study journal {journal}: its last record had lost its line break; added"
            ]
            continue
        assert journal.read_bytes() == before and got == expected, cut
        (said,) = [r.getMessage() for r in caplog.records]
        assert said.startswith(
            f"the study journal {journal}: its last record (line {len(lines)}, {cut - len(before)} bytes)"
        )
        assert "dropped, the study resumes" in said
    _study(journal, 1)  # the resumed study takes records and opens again
    assert [t[0] for t in trials(journal)] == [t[0] for t in expected] + [len(expected)]
    assert not Path(f"{journal}.lock").exists()


@pytest.mark.parametrize("last", [b"[1, 2]\n", b"\n", b"\x00\x00\x00\x00"])
def test_a_last_line_that_is_no_record_is_dropped(tmp_path, last):
    journal = tmp_path / "study.journal"
    _study(journal, 2)
    whole = journal.read_bytes()
    journal.write_bytes(whole + last)
    assert len(trials(journal)) == 2 and journal.read_bytes() == whole


def test_a_damaged_record_before_others_is_refused_and_left_as_it_is(tmp_path):
    journal = tmp_path / "study.journal"
    _study(journal, 2)
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:10] + b"\x00" * 5 + lines[2][15:]
    damaged = b"".join(lines)
    journal.write_bytes(damaged)
    at = re.escape(f"{journal} is damaged at line 3 (byte {len(lines[0]) + len(lines[1])}), before other records")
    with pytest.raises(DotsError, match=rf"the study journal {at}: not JSON.*restore it from a copy"):
        open_storage(str(journal), tmp_path)
    assert journal.read_bytes() == damaged and not Path(f"{journal}.lock").exists()


@pytest.mark.slow
def test_a_lab_search_resumes_on_a_journal_whose_last_record_was_cut(tmp_path):
    """A real lab search on a journal; its last record cut by hand, the same command resumes and
    completes; a record damaged mid-file is one error line and the journal stays as it was."""
    journal = tmp_path / "study.journal"
    args = [
        "backbone=lab",
        *SMALL_LAB,
        "export.enabled=false",
        f"run_dir={tmp_path / 'run'}",
        f"search.storage={journal}",
    ]
    run(args)
    first = [t for t in trials(journal) if t[1] == "COMPLETE"]
    assert len(first) == 3
    os.truncate(journal, journal.stat().st_size - 20)  # a crash in the middle of the last append

    def search(n: int) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "dots.search", *args, f"search.n_trials={n}"]
        return subprocess.run(command, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=900)

    proc = search(4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "study journal" in line]
    assert len(said) == 1 and "its last record" in said[0] and "dropped" in said[0], said
    assert "Traceback" not in proc.stderr
    complete = [t for t in trials(journal) if t[1] == "COMPLETE"]
    assert len(complete) == 4 and complete[:3] == first  # the earlier trials kept, one more scored
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5][:12] + b"#" * 6 + lines[5][18:]
    journal.write_bytes(b"".join(lines))
    damaged = journal.read_bytes()
    proc = search(5)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"error: the study journal {journal} is damaged at line 6"), errors
    assert journal.read_bytes() == damaged


# --- the SQLite study file: SQLite's rollback journal recovers a crash; other damage is refused ------


def _sqlite_study(db: Path, n: int) -> list[tuple]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{db}", db.parent))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=n)
    return [(t.number, t.params, t.values) for t in study.get_trials(deepcopy=False)]


def test_a_sqlite_study_killed_mid_write_is_rolled_back_and_a_cut_one_refused(tmp_path):
    import optuna

    db = tmp_path / "study.db"
    kept = _sqlite_study(db, 3)
    # a writer killed inside a transaction whose pages already reached the file (a 1-page cache spills)
    killed = "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma cache_size=1'); "
    killed += "c.execute('begin'); c.execute('update trial_values set value = -1'); c.execute('create table f(x)'); "
    killed += "c.executemany('insert into f values (?)', [(os.urandom(500),) for _ in range(300)]); os._exit(9)"
    subprocess.run([sys.executable, "-c", killed, str(db)], check=False)
    assert Path(f"{db}-journal").stat().st_size > 0  # SQLite's hot journal: the file holds a half-written transaction
    study = optuna.load_study(study_name="s", storage=open_storage(f"sqlite:///{db}", tmp_path))
    assert [(t.number, t.params, t.values) for t in study.get_trials(deepcopy=False)] == kept
    whole = db.read_bytes()
    db.write_bytes(whole[:-1])  # a cut no crash makes: SQLite would open it and add trials on top
    with pytest.raises(DotsError, match=f"the study file {re.escape(str(db))} is damaged .*move it away"):
        open_storage(f"sqlite:///{db}", tmp_path)
    assert db.read_bytes() == whole[:-1]
