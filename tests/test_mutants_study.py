"""The study's helpers in this process, so that mutation testing sees them (issue #49).

mutmut only counts tests that call a function inside the pytest process; the search's own tests
run dots in subprocesses. Covered here: reading a run back for its plot (`run_points`), the
pruning bound and the front watch a pruning scorer gets (`consistency_bound`, `dominator`,
`FrontWatch` through `run_study`), opening a database storage and its one-line errors
(`open_storage`: the retry of workers that race to create Optuna's tables, damaged files), the
tracking driver (`open_tracking`'s Tracking with a recording tracker of the project's `Tracker`
protocol: trials, failures, the pick, the end), and the study loop's random point for a stuck
sampler and its giving back of an interrupted or failed trial (`run_study`).

Real components throughout: files in tmp_path, optuna studies in memory or in SQLite, SQLAlchemy's
own SQLite dialect (registered under a second name, so that a URL takes the database-server path),
SQLite triggers standing for the rows of a worker that won a race. Stand-ins only where the
project's own interfaces are the point: a tracker of the `Tracker` protocol that records, the
fields of a search's Run that Tracking reads, and scorers that are interrupted or fail. Expected
values are worked out by hand from the docstrings (each test says how).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import TrialState, create_trial

from dots.errors import DotsError
from dots.options.search import tracking_options
from dots.options.study import study_options
from dots.search.pick.pareto import Point, run_points
from dots.search.study.pruning import PRUNED_BY, consistency_bound, dominator, is_bound_pruned
from dots.search.study.scorer import Scorer
from dots.search.study.storage import open_storage
from dots.search.study.tracking import open_tracking
from dots.search.study.trials import DUPLICATE_OF, MAX_DUPLICATES, run_study
from dots.search.study.workers import RETRY_OF

optuna.logging.set_verbosity(optuna.logging.WARNING)

NAMES = ["lambda_sft", "lambda_rlvr"]
DIST = {n: FloatDistribution(0.0, 2.0) for n in NAMES}
RECOVERY = (
    "restore it from a copy, or move it away and rerun to start the study again "
    "(its trials are lost; the selection and τ̃ are kept)"
)


def two_objective_study(storage=None, name=None):
    """An empty (consistency ↑, perplexity ↓) study, as the search makes it."""
    return optuna.create_study(storage=storage, study_name=name, directions=["maximize", "minimize"])


def complete(study, c, ppl, sft=1.0, rlvr=1.0, **attrs):
    """Add a complete trial (C, PPL) at (sft, rlvr); its frozen trial."""
    study.add_trial(
        create_trial(
            params={"lambda_sft": sft, "lambda_rlvr": rlvr}, distributions=DIST, values=[c, ppl], user_attrs=attrs
        )
    )
    return study.trials[-1]


def pruned(study, sft=1.0, rlvr=1.0, **attrs):
    """Add a PRUNED trial (no values) with these user attributes; its frozen trial."""
    study.add_trial(
        create_trial(
            params={"lambda_sft": sft, "lambda_rlvr": rlvr},
            distributions=DIST,
            state=TrialState.PRUNED,
            user_attrs=attrs,
        )
    )
    return study.trials[-1]


# --- run_points: a run directory read back ------------------------------------------------------

TRIALS_CSV = """\
number,state,lambda_sft,lambda_rlvr,consistency,perplexity,tokens_generated,pruned_after_queries,time_total
0,COMPLETE,1.0,0.5,0.75,2.5,120,,1.25
1,PRUNED,0.25,1.5,,,40,2,0.5
2,COMPLETE,0.0,2.0,0.875,3.25,130,,1.5
3,FAIL,1.5,1.5,,,,,
4,COMPLETE,2.0,0.0,0.5,2.0,110,,1.0
"""


def write_run(run_dir: Path, config: str | None) -> Path:
    """A run directory as a search leaves it: trials.csv, result.yaml (pick: trial 2) and,
    unless `config` is None, config.yaml with that text."""
    run_dir.mkdir()
    (run_dir / "trials.csv").write_text(TRIALS_CSV)
    (run_dir / "result.yaml").write_text("trial: 2\nobjectives:\n  consistency: 0.875\n  perplexity: 3.25\n")
    if config is not None:
        (run_dir / "config.yaml").write_text(config)
    return run_dir


def test_the_run_points_are_the_complete_trials_with_their_lambda_and_the_pick_of_result_yaml(tmp_path):
    """Only COMPLETE rows become points (a pruned or failed row has no objectives), each with its
    number, C, PPL and λ from the `lambda_*` columns (prefix dropped); the pick is result.yaml's trial."""
    points, chosen, title = run_points(write_run(tmp_path / "run", "backbone:\n  name: Qwen/Qwen2.5-Math-1.5B\n"))
    # by hand from TRIALS_CSV: rows 0, 2 and 4 are COMPLETE
    assert points == [
        Point(0, 0.75, 2.5, {"sft": 1.0, "rlvr": 0.5}),
        Point(2, 0.875, 3.25, {"sft": 0.0, "rlvr": 2.0}),
        Point(4, 0.5, 2.0, {"sft": 2.0, "rlvr": 0.0}),
    ]
    assert all(isinstance(p.number, int) and isinstance(p.consistency, float) for p in points)
    assert chosen == points[1] and chosen.number == 2  # result.yaml's trial, not the first point
    assert title == "DoTS on Qwen/Qwen2.5-Math-1.5B"


@pytest.mark.parametrize(
    "config",
    [None, "", "seed: 0\n", "backbone: lab\n", "backbone:\n  name: null\n", "backbone:\n  base: some/base\n"],
    ids=["no-config", "empty", "no-backbone", "backbone-not-a-mapping", "null-name", "no-name"],
)
def test_a_run_without_a_backbone_name_gets_no_title(tmp_path, config):
    """The figure's title names the backbone only when config.yaml has `backbone.name`; a run
    without config.yaml, an empty one, or a backbone without a name gets the empty title."""
    points, chosen, title = run_points(write_run(tmp_path / "run", config))
    assert title == ""
    assert [p.number for p in points] == [0, 2, 4] and chosen.number == 2


# --- pruning: the bound, dominance, the watch ---------------------------------------------------


def test_the_consistency_bound_counts_every_query_not_scored_as_perfect():
    """C_ub = (c_1 + … + c_b + (Q − b)·1) / Q, summed in order (by hand: (0.5 + 0.25 + 1 + 1) / 4)."""
    assert consistency_bound([0.5, 0.25], 4) == 0.6875
    assert consistency_bound([0.5, 0.25], 2) == 0.375  # all scored: the trial's own mean
    assert consistency_bound([], 3) == 1.0
    assert consistency_bound([0.0], 5) == 0.8
    assert consistency_bound([0.1, 0.2], 3) == (0.1 + 0.2 + 1.0) / 3  # the same float as the trial's own sum


def test_a_complete_trial_dominates_with_one_objective_strictly_better_and_the_first_one_is_named():
    """(C, PPL) q dominates the bound point when C ≥ and PPL ≤, one strictly; a tie on both, or one
    objective worse, does not; the first dominating trial in the given order is the one named."""
    assert dominator([(7, 0.75, 2.0)], 0.75, 2.5) == 7  # equal C, lower PPL
    assert dominator([(7, 0.8, 2.5)], 0.75, 2.5) == 7  # higher C, equal PPL
    assert dominator([(7, 0.75, 2.5)], 0.75, 2.5) is None  # a tie on both: could still join the front
    assert dominator([(7, 0.9, 2.6)], 0.75, 2.5) is None  # higher C but higher PPL
    assert dominator([(7, 0.7, 1.0)], 0.75, 2.5) is None  # lower PPL but lower C
    assert dominator([(7, 0.7, 2.6)], 0.75, 2.5) is None  # worse on both
    assert dominator([], 0.75, 2.5) is None
    assert dominator([(3, 0.1, 9.0), (5, 0.9, 1.0), (4, 1.0, 0.5)], 0.8, 2.0) == 5  # first in order


def test_a_trial_is_bound_pruned_only_with_the_pruning_record():
    """A PRUNED trial carrying PRUNED_BY was stopped by the bound; one set aside as a duplicate was not."""
    study = two_objective_study()
    assert is_bound_pruned(pruned(study, **{PRUNED_BY: {"queries_scored": 1}}))
    assert not is_bound_pruned(pruned(study, **{DUPLICATE_OF: 0}))
    assert not is_bound_pruned(complete(study, 0.5, 2.0))


def front_watch(study):
    """The watch `run_study` gives a scorer with search.prune on: a real Scorer (never called, so
    without an engine), attached by a run_study that has nothing to do (n_trials=0)."""
    options = study_options({"prune": True, "k": 2, "temperature": 1.0, "top_p": 1.0, "max_tokens": 8})
    scorer = Scorer(None, ["q1", "q2", "q3", "q4"], options)  # type: ignore[arg-type]
    run_study(study, scorer, ["sft", "rlvr"], (0.0, 2.0), n_trials=0, seed=0)
    assert scorer.pruner is not None
    return scorer.pruner


def test_the_front_watch_names_the_complete_trial_that_dominates_the_bound_and_records_the_cut():
    """After b of Q queries the watch returns the pruning record: queries scored and in all, the
    partial mean, the bound, the PPL and the dominating trial; pruned and running trials are no front."""
    study = two_objective_study()
    complete(study, 0.0, 1.0)  # #0: lower PPL but C = 0: never dominates (read as (PPL, C) it would)
    complete(study, 0.75, 2.0, sft=0.5)  # #1
    pruned(study, **{PRUNED_BY: {"queries_scored": 1}})  # #2: no values
    study.ask()  # #3: running, no values
    watch = front_watch(study)
    # by hand: partial (0.5 + 0.25) / 2 = 0.375, bound (0.5 + 0.25 + 1 + 1) / 4 = 0.6875 ≤ 0.75, 2.0 ≤ 2.5
    assert watch([0.5, 0.25], 4, 2.5) == {
        "queries_scored": 2,
        "queries": 4,
        "consistency_partial": 0.375,
        "consistency_bound": 0.6875,
        "perplexity": 2.5,
        "dominated_by": 1,
    }
    assert watch([0.5], 2, 2.5)["dominated_by"] == 1  # bound 0.75 = #1's C, PPL 2.0 < 2.5: dominated
    assert watch([0.5], 2, 2.0) is None  # bound 0.75 and PPL 2.0: a tie with #1, kept
    assert watch([0.5, 0.25], 4, 1.5) is None  # lower PPL than #1: may still reach the front
    assert watch([1.0, 0.5], 4, 2.5) is None  # bound 0.875 > 0.75


def test_the_front_watch_reads_the_study_at_each_call():
    """A trial completed meanwhile (by this or another worker on shared storage) prunes at the next call."""
    study = two_objective_study()
    watch = front_watch(study)
    assert watch([0.0], 2, 3.0) is None  # no complete trial yet
    complete(study, 0.6, 2.0)
    # by hand: bound (0 + 1) / 2 = 0.5 ≤ 0.6, PPL 2.0 ≤ 3.0
    assert watch([0.0], 2, 3.0) == {
        "queries_scored": 1,
        "queries": 2,
        "consistency_partial": 0.0,
        "consistency_bound": 0.5,
        "perplexity": 3.0,
        "dominated_by": 0,
    }


# --- storage: database servers, damaged files -------------------------------------------------

ALIAS = "dotstestdb"  # SQLAlchemy's own SQLite dialect under a name that is not `sqlite`


@pytest.fixture(scope="module", autouse=True)
def sqlite_as_a_server_dialect():
    """SQLite registered under a second dialect name, so that its URLs take the database-server
    path of open_storage (like mysql:// or postgresql://) on a real database."""
    from sqlalchemy.dialects import registry

    registry.register(ALIAS, "sqlalchemy.dialects.sqlite.pysqlite", "SQLiteDialect_pysqlite")


def server_url(path: Path) -> str:
    return f"{ALIAS}:///{path}"


def half_made(path: Path, message: str | None) -> None:
    """A study database on which another worker has created Optuna's tables but not yet stamped
    their schema version: Optuna's insert of the stamp here fails with `message`, as the insert of
    a worker that lost the race does (a trigger stands for the winner's row; drop it to let it in)."""
    open_storage(f"sqlite:///{path}", path.parent).engine.dispose()
    with closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM alembic_version")
        db.execute(f"CREATE TRIGGER race BEFORE INSERT ON alembic_version BEGIN SELECT RAISE(ABORT, '{message}'); END")
        db.commit()


def race_won(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("DROP TRIGGER race")
        db.commit()


@pytest.fixture
def sleeps(monkeypatch):
    """time.sleep recorded instead of slept; `sleeps.then` runs at each sleep (the other worker)."""
    record = SimpleNamespace(seconds=[], then=lambda: None)

    def sleep(seconds):
        record.seconds.append(seconds)
        record.then()

    monkeypatch.setattr(time, "sleep", sleep)
    return record


def test_a_database_url_opens_a_storage_that_pings_its_connections(tmp_path, sleeps):
    """A server URL gets an RDB storage whose pool checks each connection before use (a server
    may drop idle ones), and it holds a study; nothing to retry on an empty database."""
    db = tmp_path / "server.db"
    storage = open_storage(server_url(db), tmp_path)
    assert storage.engine.pool._pre_ping is True
    study = two_objective_study(storage, "s")
    complete(study, 0.5, 2.0)
    again = optuna.load_study(study_name="s", storage=open_storage(server_url(db), tmp_path))
    assert [t.values for t in again.trials] == [[0.5, 2.0]]
    assert sleeps.seconds == []


@pytest.mark.parametrize(
    "message",
    [
        "index ix_studies_study_name already exists",  # SQLite, PostgreSQL tables and indexes
        "Duplicate entry 1 for key PRIMARY",  # MySQL / MariaDB
        "duplicate key value violates unique constraint alembic_version_pkc",  # PostgreSQL rows
    ],
)
def test_a_worker_that_lost_the_race_to_create_the_tables_waits_and_opens_again(tmp_path, sleeps, message):
    """The loser of the race sees `already exists` or a duplicate key: it waits 0.5 s and opens
    again, and gets the storage the winner finished."""
    db = tmp_path / "server.db"
    half_made(db, message)
    sleeps.then = lambda: race_won(db)
    storage = open_storage(server_url(db), tmp_path)
    assert sleeps.seconds == [0.5]  # 0.5·(attempt + 1) after the first attempt
    assert storage.engine.pool._pre_ping is True
    assert two_objective_study(storage, "s").study_name == "s"


def test_a_race_lost_five_times_is_one_line_after_waits_growing_by_half_a_second(tmp_path, sleeps):
    """Five tries, the waits between them 0.5, 1, 1.5, 2 s; then the error, as one line naming the URL."""
    db = tmp_path / "server.db"
    half_made(db, "Duplicate entry 1 for key PRIMARY")
    with pytest.raises(DotsError) as caught:
        open_storage(server_url(db), tmp_path)
    assert sleeps.seconds == [0.5, 1.0, 1.5, 2.0]
    assert str(caught.value) == (
        f"cannot open the study storage '{server_url(db)}': (sqlite3.IntegrityError) Duplicate entry 1 for key PRIMARY"
    )


def test_any_other_database_error_is_one_line_at_once(tmp_path, sleeps):
    """An error that is not a lost race is not retried: one line with its first line."""
    db = tmp_path / "server.db"
    half_made(db, "permission denied for table alembic_version")
    with pytest.raises(DotsError) as caught:
        open_storage(server_url(db), tmp_path)
    assert sleeps.seconds == []
    assert str(caught.value) == (
        f"cannot open the study storage '{server_url(db)}': "
        "(sqlite3.IntegrityError) permission denied for table alembic_version"
    )
    with pytest.raises(DotsError, match=r"^cannot open the study storage 'nosuchdb://x': Can't load plugin"):
        open_storage("nosuchdb://x", tmp_path)


def test_a_sqlite_file_that_cannot_be_opened_is_its_first_line_not_a_damaged_file(tmp_path):
    """SQLite's error (two lines: the error, then SQLAlchemy's link) as its first line only; a file
    that is merely not there is not called damaged."""
    url = f"sqlite:///{tmp_path / 'missing' / 'study.db'}"
    with pytest.raises(DotsError) as caught:
        open_storage(url, tmp_path)
    assert (
        str(caught.value)
        == f"cannot open the study storage '{url}': (sqlite3.OperationalError) unable to open database file"
    )


def test_an_error_without_a_message_is_named_by_its_type(tmp_path):
    """A study file whose version row cannot be written (a trigger drops it) fails Optuna's own
    check with a bare AssertionError: the line names the error's type."""
    db = tmp_path / "study.db"
    open_storage(f"sqlite:///{db}", tmp_path).engine.dispose()
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DELETE FROM version_info")
        conn.execute("CREATE TRIGGER lost BEFORE INSERT ON version_info BEGIN SELECT RAISE(IGNORE); END")
        conn.commit()
    with pytest.raises(DotsError) as caught:
        open_storage(f"sqlite:///{db}", tmp_path)
    assert str(caught.value) == f"cannot open the study storage 'sqlite:///{db}': AssertionError"


@pytest.mark.parametrize("damage", ["not a database", "malformed"])
def test_a_damaged_sqlite_file_opened_past_the_integrity_check_says_so_and_how_to_recover(tmp_path, damage):
    """A SQLite URL with a query (`?timeout=`) skips the integrity check; SQLite's own error then
    says the file is damaged: one line with the file, SQLite's reason without the driver's
    prefix, and how to recover."""
    db = tmp_path / "study.db"
    if damage == "not a database":
        db.write_bytes(b"x" * 8192)
        reason = "file is not a database"
    else:  # a valid first page, every later page overwritten
        open_storage(f"sqlite:///{db}", tmp_path).engine.dispose()
        data = db.read_bytes()
        db.write_bytes(data[:4096] + b"Z" * (len(data) - 4096))
        reason = "database disk image is malformed"
    with pytest.raises(DotsError) as caught:
        open_storage(f"sqlite:///{db}?timeout=5", tmp_path)
    line = str(caught.value)
    assert line.startswith(f"the study file {db}") and "\n" not in line
    assert line.endswith(f" is damaged ({reason}); {RECOVERY}")


# --- tracking: the driver with a recording tracker --------------------------------------------


class RecordingTracker:
    """The `Tracker` protocol (dots.search.study.tracking.base), keeping what it is given; it
    refuses the trials in `refuse` and, with `close_error`, its close (a server gone)."""

    def __init__(self, held=(), refuse=(), close_error=None):
        self.held = set(held)
        self.refuse = set(refuse)
        self.close_error = close_error
        self.started = []
        self.trials = []
        self.picks = []
        self.closed = []

    def check(self):
        pass

    def start(self, run_dir, config, worker, workers):
        self.started.append((run_dir, config, worker, workers))
        return set(self.held)

    def log_trial(self, number, metrics):
        if number in self.refuse:
            raise ConnectionError("connection refused")
        self.trials.append((number, metrics))

    def log_pick(self, step, pick, files):
        self.picks.append((step, pick, files))

    def close(self, status):
        if self.close_error:
            raise ConnectionError(self.close_error)
        self.closed.append(status)


def tracking_with(tracker):
    """A search's Tracking driving `tracker`: the class `open_tracking` returns (not in its
    module's __all__), made as open_tracking makes it."""
    return type(open_tracking(tracking_options({"name": "none"})))(tracker)


def search_run(run_dir, study, pick=None):
    """What Tracking reads of a search's Run (dots.search.run, which has no __all__): its
    directory, config, worker, λ names, study and pick."""
    options = SimpleNamespace(config={"seed": 0}, search=SimpleNamespace(worker=1, workers=2))
    return SimpleNamespace(
        run_dir=run_dir, options=options, param_names=NAMES, results=SimpleNamespace(study=study, pick=pick)
    )


def started(tracker, tmp_path, study, pick=None):
    tracking = tracking_with(tracker)
    run = search_run(tmp_path, study, pick)
    tracking.start(run)
    assert tracker.started == [(tmp_path, {"seed": 0}, 1, 2)]
    return tracking, run


TIMES = {"total": 1.23456, "generate": 0.5}
FILES = ["config.yaml", "result.yaml", "trials.csv", "pareto.png", "landscape.png", "confirm.json", "fixed.csv"]


def test_a_told_trial_is_logged_once_as_its_trials_csv_row_in_numbers(tmp_path):
    """Each scored trial told to Optuna is logged at step = its number: every trials.csv value
    but number and state, as floats, without empty cells, and pruned = 0; telling it again logs nothing."""
    tracker = RecordingTracker()
    study = two_objective_study()
    tracking, _ = started(tracker, tmp_path, study)
    counts = {"tokens_generated": 120, "samples_drawn": 8, "sampling_seed": 7}
    trial = complete(study, 0.75, 2.5, sft=1.0, rlvr=0.5, time=TIMES, **counts)
    tracking.told(study, trial)
    tracking.told(study, trial)
    # by hand from the trial: its λ, objectives, counts, the times rounded to 4 places; no pruned_after_queries
    assert tracker.trials == [
        (
            0,
            {
                "lambda_sft": 1.0,
                "lambda_rlvr": 0.5,
                "consistency": 0.75,
                "perplexity": 2.5,
                "tokens_generated": 120.0,
                "samples_drawn": 8.0,
                "sampling_seed": 7.0,
                "time_total": 1.2346,
                "time_generate": 0.5,
                "pruned": 0.0,
            },
        )
    ]
    assert all(type(v) is float for v in tracker.trials[0][1].values())
    assert tracking.logged == {0} and not tracking.failed


def test_a_bound_pruned_trial_is_logged_as_pruned_and_set_aside_or_failed_trials_are_not(tmp_path):
    """A trial the bound stopped has values to log (pruned = 1, where it stopped, no objectives);
    a proposal set aside as a duplicate, a failed trial and a trial the tracker holds already are not logged."""
    tracker = RecordingTracker(held={3})
    study = two_objective_study()
    tracking, _ = started(tracker, tmp_path, study)
    cut = pruned(study, sft=0.25, rlvr=1.5, tokens_generated=40, **{PRUNED_BY: {"queries_scored": 2}})
    duplicate = pruned(study, **{DUPLICATE_OF: 0})
    params = {"lambda_sft": 1.0, "lambda_rlvr": 1.0}
    study.add_trial(create_trial(params=params, distributions=DIST, state=TrialState.FAIL))
    failed = study.trials[-1]
    held = complete(study, 0.5, 2.0)  # #3: logged by an earlier run (the tracker said so at start)
    for trial in (cut, duplicate, failed, held):
        tracking.told(study, trial)
    metrics = {"lambda_sft": 0.25, "lambda_rlvr": 1.5, "tokens_generated": 40.0, "pruned_after_queries": 2.0}
    assert tracker.trials == [(0, {**metrics, "pruned": 1.0})]  # by hand: no objectives, pruned = 1
    assert tracking.logged == {0, 3}


def test_a_trial_the_tracker_refuses_is_one_warning_and_later_trials_wait_for_the_end(tmp_path, caplog):
    """A failed log: one warning naming the trial and why, then no more logging while the search
    runs; at the end every scored trial not logged yet is logged, then the pick and the files."""
    tracker = RecordingTracker(refuse={1})
    study = two_objective_study()
    tracking, run = started(tracker, tmp_path, study, pick={})
    trials = [complete(study, 0.5 + i / 8, 2.0 + i, sft=i / 2) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="dots.search"):
        for trial in trials:
            tracking.told(study, trial)
    assert [r.getMessage() for r in caplog.records] == [
        "tracking: logging trial 1 failed (connection refused); the trials left are logged at the end"
    ]
    assert [n for n, _ in tracker.trials] == [0] and tracking.failed and tracking.logged == {0}
    tracker.refuse.clear()  # the server is back
    tracking.finish(run)
    assert [n for n, _ in tracker.trials] == [0, 1, 2]  # trial 0 not again
    assert tracker.trials[2][1]["consistency"] == 0.75 and tracker.trials[2][1]["lambda_sft"] == 1.0
    assert tracker.picks == [(3, {}, [tmp_path / name for name in FILES])]
    assert tracker.closed == ["FINISHED"] and tracking.tracker is None


def test_a_study_storage_that_fails_while_a_trial_is_logged_is_one_warning(tmp_path, caplog):
    """The trial's stored row cannot be read (the study's SQLite file damaged): one warning with the
    trial's number, tracking stops for the search, and a Tracking without a tracker does nothing."""
    db = tmp_path / "study.db"
    storage = open_storage(f"sqlite:///{db}", tmp_path)
    trial = complete(two_objective_study(storage, "s"), 0.5, 2.0)
    study = optuna.load_study(study_name="s", storage=storage)  # (a worker's own view: nothing cached yet)
    tracker = RecordingTracker()
    tracking, _ = started(tracker, tmp_path, study)
    db.write_bytes(b"x" * 8192)
    with caplog.at_level(logging.WARNING, logger="dots.search"):
        tracking.told(study, trial)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("tracking: logging trial 0 failed (") and said.endswith(
        "); the trials left are logged at the end"
    )
    assert tracking.failed and tracker.trials == [] and tracking.logged == set()
    memory = two_objective_study()
    fine = complete(memory, 0.5, 2.0)
    tracking.told(memory, fine)  # failed: nothing more while the search runs
    assert tracker.trials == []
    tracking_with(None).told(memory, fine)  # tracking=none: nothing to log, nothing raised


def test_the_pick_is_logged_as_numbers_with_one_lambda_per_source_and_group(tmp_path):
    """pick/trial, pick/<objective> and pick/lambda_<source>[_<group>] (nested λ flattened, dots
    made underscores), after the number of scored trials (complete and bound-pruned)."""
    tracker = RecordingTracker()
    study = two_objective_study()
    pick = {
        "trial": 1,
        "objectives": {"consistency": 0.75, "perplexity": 2.5},
        "coefficients": {"sft": {"attention": 1, "mlp": 0.5}, "rlvr": 0.25},
    }
    tracking, run = started(tracker, tmp_path, study, pick)
    complete(study, 0.5, 2.0)
    complete(study, 0.75, 2.5)
    pruned(study, **{PRUNED_BY: {"queries_scored": 1}})
    pruned(study, **{DUPLICATE_OF: 0})  # not scored
    tracking.finish(run)
    ((step, values, _),) = tracker.picks
    assert step == 3
    assert values == {
        "pick/trial": 1.0,
        "pick/consistency": 0.75,
        "pick/perplexity": 2.5,
        "pick/lambda_sft_attention": 1.0,
        "pick/lambda_sft_mlp": 0.5,
        "pick/lambda_rlvr": 0.25,
    }
    assert all(type(v) is float for v in values.values())
    assert [n for n, _ in tracker.trials] == [0, 1, 2]


def test_a_fixed_run_logs_no_pick_values(tmp_path):
    """search.fixed runs pick nothing (result.yaml without a pick): the pick is logged empty."""
    tracker = RecordingTracker()
    study = two_objective_study()
    tracking, run = started(tracker, tmp_path, study, pick=None)
    tracking.finish(run)
    assert tracker.picks == [(0, {}, [tmp_path / name for name in FILES])]


@pytest.mark.parametrize(
    "exc,status",
    [(KeyboardInterrupt(), "KILLED"), (SystemExit(143), "KILLED"), (RuntimeError("boom"), "FAILED")],
    ids=["ctrl-c", "sigterm", "error"],
)
def test_a_stopped_search_ends_its_tracked_run_killed_or_failed_once(tmp_path, exc, status):
    """Interrupted (Ctrl-C, SIGTERM's SystemExit): KILLED; any other error: FAILED; a second close
    does nothing (the tracker is let go)."""
    tracker = RecordingTracker()
    tracking, _ = started(tracker, tmp_path, two_objective_study())
    tracking.close(exc)
    assert tracker.closed == [status] and tracking.tracker is None
    tracking.close(exc)
    assert tracker.closed == [status]
    tracking_with(None).close(exc)  # tracking=none: nothing to close


def test_a_tracked_run_that_cannot_be_marked_is_one_warning(tmp_path, caplog):
    """The tracker's close fails (its server gone): one warning with the status and why, no raise."""
    tracker = RecordingTracker(close_error="server gone")
    tracking, _ = started(tracker, tmp_path, two_objective_study())
    with caplog.at_level(logging.WARNING, logger="dots.search"):
        tracking.close(ValueError("bad"))
    assert [r.getMessage() for r in caplog.records] == ["tracking: could not mark the run FAILED (server gone)"]
    assert tracking.tracker is None


@pytest.mark.parametrize("backend,package", [("mlflow", "mlflow-skinny"), ("wandb", "wandb")])
def test_a_missing_tracking_package_is_one_line_naming_it_and_how_to_install(monkeypatch, backend, package):
    """open_tracking imports the backend's package first: not installed, one line saying which
    package, why, how to install it, and tracking=none."""
    monkeypatch.setitem(sys.modules, backend, None)  # `import <backend>` fails as if absent
    with pytest.raises(DotsError) as caught:
        open_tracking(
            tracking_options({"name": backend, "mode": "offline"} if backend == "wandb" else {"name": backend})
        )
    assert str(caught.value) == (
        f"tracking={backend} needs the {package} package, which cannot be imported (import of {backend} "
        f"halted; None in sys.modules): pip install 'dots-synth[tracking]' (or pip install {package}), "
        "or run with tracking=none"
    )


# --- the study loop: a stuck sampler, interrupted and failed trials -------------------------------


class StuckSampler(BaseSampler):
    """A sampler whose proposal never changes, reseeded or not (GPSampler with its acquisition
    optimum on a scored point); it gives up after `limit` proposals (a loop that never ends)."""

    def __init__(self, point, limit=20):
        self.point = point
        self.limit = limit
        self.asked = 0

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        self.asked += 1
        if self.asked > self.limit:
            raise RuntimeError("the sampler was asked forever")
        return self.point[name]

    def reseed_rng(self):
        pass


def interrupted(coefficients, seed):
    """A trial's scoring cut by Ctrl-C."""
    raise KeyboardInterrupt


def test_a_sampler_stuck_on_a_scored_point_gets_a_seeded_uniform_random_point(tmp_path, caplog):
    """After MAX_DUPLICATES proposals of a scored point in a row, a uniform point in the bounds is
    enqueued, seeded by the run's seed and the study's trial count, and said in one warning; the
    next trial takes it (here interrupted: failed, and its point queued again for a resume)."""
    study = two_objective_study()
    complete(study, 0.5, 2.0, sft=0.5, rlvr=1.5)
    study.sampler = StuckSampler({"lambda_sft": 0.5, "lambda_rlvr": 1.5})
    with caplog.at_level(logging.WARNING, logger="dots.search"), pytest.raises(KeyboardInterrupt):
        run_study(study, interrupted, ["sft", "rlvr"], (0.0, 2.0), n_trials=2, seed=7)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, *[TrialState.PRUNED] * MAX_DUPLICATES, TrialState.FAIL, TrialState.WAITING]
    assert all(t.user_attrs[DUPLICATE_OF] == 0 for t in study.trials[1:4])
    # by hand from the docstring: seeded by seed and the trial count then (the scored one and 3 set aside)
    rng = random.Random(7 * 1_000_003 + 1 + MAX_DUPLICATES)
    point = {"lambda_sft": rng.uniform(0.0, 2.0), "lambda_rlvr": rng.uniform(0.0, 2.0)}
    assert study.trials[4].params == point and all(0.0 <= v <= 2.0 for v in point.values())
    assert study.trials[5].system_attrs["fixed_params"] == point and study.trials[5].user_attrs[RETRY_OF] == 4
    warned = [r.getMessage() for r in caplog.records if "random point" in r.getMessage()]
    assert warned == [
        f"the sampler proposed scored points 3 times in a row; the next trial is a random point "
        f"(lambda_sft={point['lambda_sft']:.3f}, lambda_rlvr={point['lambda_rlvr']:.3f})"
    ]


def test_the_random_point_moves_with_the_seed():
    """Two seeds, two points: the seed enters the random point (same study, same trial count)."""
    points = []
    for seed in (0, 1):
        study = two_objective_study()
        complete(study, 0.5, 2.0, sft=0.5, rlvr=1.5)
        study.sampler = StuckSampler({"lambda_sft": 0.5, "lambda_rlvr": 1.5})
        with pytest.raises(KeyboardInterrupt):
            run_study(study, interrupted, ["sft", "rlvr"], (0.0, 2.0), n_trials=2, seed=seed)
        points.append(study.trials[4].params)
    expected = [random.Random(seed * 1_000_003 + 4) for seed in (0, 1)]
    assert points == [{n: rng.uniform(0.0, 2.0) for n in NAMES} for rng in expected]
    assert points[0] != points[1]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_trial_fails_and_its_point_is_queued_again(stop):
    """Ctrl-C or SIGTERM while a trial is scored: it is told FAIL and its point enqueued again
    (RETRY_OF: its number), so a resume scores it."""

    def scorer(coefficients, seed):
        raise stop

    study = two_objective_study()
    study.sampler = RandomSampler(seed=3)
    with pytest.raises(stop):
        run_study(study, scorer, ["sft", "rlvr"], (0.0, 2.0), n_trials=1, seed=0)
    failed, retry = study.trials
    assert failed.state == TrialState.FAIL and retry.state == TrialState.WAITING
    assert retry.system_attrs["fixed_params"] == failed.params and set(failed.params) == set(NAMES)
    assert retry.user_attrs[RETRY_OF] == 0


def test_a_trial_whose_scoring_raises_fails_and_is_not_queued_again():
    """Any other error while a trial is scored: the trial is told FAIL, nothing is enqueued, the error goes on."""

    def scorer(coefficients, seed):
        raise RuntimeError("the engine died")

    study = two_objective_study()
    study.sampler = RandomSampler(seed=3)
    with pytest.raises(RuntimeError, match="the engine died"):
        run_study(study, scorer, ["sft", "rlvr"], (0.0, 2.0), n_trials=1, seed=0)
    assert [t.state for t in study.trials] == [TrialState.FAIL]


def test_a_point_that_cannot_be_drawn_fails_its_trial():
    """An error while the trial draws its λ (a range with low > high): the asked trial is told
    FAIL rather than left running, and the error goes on."""
    study = two_objective_study()
    study.sampler = RandomSampler(seed=3)
    with pytest.raises(ValueError):
        run_study(study, interrupted, ["sft", "rlvr"], (2.0, 0.0), n_trials=1, seed=0)
    assert [t.state for t in study.trials] == [TrialState.FAIL]


class CutSampler(StuckSampler):
    """Ctrl-C while the sampler draws `lambda_rlvr`, after `lambda_sft` was drawn."""

    def sample_independent(self, study, trial, name, distribution):
        if name == "lambda_rlvr":
            raise KeyboardInterrupt
        return super().sample_independent(study, trial, name, distribution)


def test_a_trial_interrupted_before_all_its_lambda_are_drawn_fails_and_is_not_queued_again():
    """Ctrl-C between two λ draws: the trial fails, and its half-drawn point (it scored nothing) is
    not enqueued: only a point with every λ of the study is worth a retry."""
    study = two_objective_study()
    study.sampler = CutSampler({"lambda_sft": 0.5})
    with pytest.raises(KeyboardInterrupt):
        run_study(study, interrupted, ["sft", "rlvr"], (0.0, 2.0), n_trials=1, seed=0)
    (cut,) = study.trials
    assert cut.state == TrialState.FAIL and cut.params == {"lambda_sft": 0.5}
