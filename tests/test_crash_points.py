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

MERGE = "dots.merge"
COMMANDS = {
    "merge into a new directory": Command(
        "merge-new", MERGE, ["method=task_arithmetic", "output=out"], ["out"], signals=(signal.SIGKILL,)
    ),
    "merge over its previous output (overwrite=true)": Command(
        "merge-overwrite",
        MERGE,
        ["method=task_arithmetic", "output=out", "overwrite=true"],
        ["out"],
        before=[(MERGE, ["method=ties", "output=out"])],
    ),
    "merge through new τ̃ cache entries (dots_fixed)": Command(
        "merge-taskvec",
        MERGE,
        ["method=dots_fixed", "output=out", "cache_dir=cache"],
        ["out", "cache"],
        signals=(signal.SIGKILL,),
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
