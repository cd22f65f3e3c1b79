"""Crash consistency, enumerated (#48; docs/outputs.md "What a crash leaves"): every write, rename,
fsync and delete a command makes is a crash point; the command is killed at each one in turn
(SIGKILL, and SIGTERM, which dots turns into a clean exit), the destination must then hold the old
version whole or the new one whole, and the same command rerun must finish with the clean run's
bytes and leave no temporary file (tests/crash_points.py says how)."""

from __future__ import annotations

import signal
import sys

import pytest
from crash_points import Command, build_shim, enumerate_crashes, start

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc: Linux"),
    pytest.mark.xdist_group("crash_points"),
    pytest.mark.timeout(1200),
]

MERGE, SEARCH = "dots.merge", "dots.search"
# the smallest lab search (2 trials, 2 queries of 8, no confirmation), its run and cache in the work folder
SMALL_SEARCH = [
    "engine=hf",
    "search.n_trials=2",
    "search.n_startup_trials=2",
    "pool.size=8",
    "selection.n=2",
    "selection.m=2",
    "search.k=1",
    "confirm.enabled=false",
    "run_dir=run",
    "cache_dir=cache",
]
COMMANDS = {
    "merge into a new directory": Command("merge-new", MERGE, ["method=task_arithmetic", "output=out"], ["out"]),
    "merge over its previous output (overwrite=true)": Command(
        "merge-overwrite",
        MERGE,
        ["method=task_arithmetic", "output=out", "overwrite=true"],
        ["out"],
        before=[(MERGE, ["method=ties", "output=out"])],
        signals=(signal.SIGTERM,),
    ),
    "merge through new τ̃ cache entries (dots_fixed)": Command(
        "merge-taskvec",
        MERGE,
        ["method=dots_fixed", "output=out", "cache_dir=cache"],
        ["out", "cache/taskvec"],
        growing=("cache/taskvec",),
    ),
    "a search's export replaced by a rerun of its run": Command(
        "search-export",
        SEARCH,
        [*SMALL_SEARCH, "backbone.config_from=sft"],
        ["run/model"],
        before=[(SEARCH, SMALL_SEARCH)],
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    shim = build_shim(tmp_path_factory.mktemp("shim"))
    server = start(shim)
    yield server
    server.close()


@pytest.mark.parametrize("what", list(COMMANDS))
def test_every_crash_point_leaves_old_or_new_and_the_rerun_finishes(server, tmp_path, what, capsys):
    command = COMMANDS[what]
    report = enumerate_crashes(server, command, tmp_path / "work", tmp_path)
    with capsys.disabled():
        print(f"\n{report.summary()}")
    assert not report.failures, "\n".join(report.failures[:10])
    kinds = {point.split()[0] for point in report.points}
    assert {"write", "rename", "fsync"} <= kinds  # the protocol's own steps were among the points
    assert report.killed[signal.SIGKILL] == len(report.points)  # every point was reached and ended the run
