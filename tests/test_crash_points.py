"""Crash consistency, enumerated (#48; docs/outputs.md "What a crash leaves"): every write, rename,
fsync and delete a command makes is a crash point; the command is killed at each one in turn
(SIGKILL, and SIGTERM, which dots turns into a clean exit), the destination must then hold the old
version whole or the new one whole, and the same command rerun must finish with the clean run's
bytes and leave no temporary file (tests/crash_points.py says how)."""

from __future__ import annotations

import hashlib
import json
import signal
import sys
from pathlib import Path

import pytest
from crash_points import Command, build_shim, enumerate_crashes, snapshot, start

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc: Linux"),
    pytest.mark.xdist_group("crash_points"),
    pytest.mark.timeout(1200),
]

MERGE, SEARCH = "dots.merge", "dots.search"
JOURNAL, N_TRIALS = "study.journal", 2
# the smallest lab search (2 trials, 2 queries of 8, no confirmation), its run and cache in the work folder
SMALL_SEARCH = [
    "engine=hf",
    f"search.n_trials={N_TRIALS}",
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
    "a search resumed after a crash at each write of its study journal": Command(
        "search-resume",
        SEARCH,
        [*SMALL_SEARCH, f"search.storage={JOURNAL}"],
        ["run/model"],
        roots=(JOURNAL,),
        stale=(f"{JOURNAL}.lock",),  # Optuna's lock of a killed appender: its 30 s grace, not dots', clears it
        rerun_check=lambda crashed, rerun, clean: resumed_study(crashed, rerun, clean),
    ),
}


def complete_trials(folder: Path) -> list[tuple[tuple[tuple[str, float], ...], tuple[float, ...]]]:
    """The complete trials of the study journal in `folder`: (their coefficients, their objectives)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if not (folder / JOURNAL).exists():
        return []
    storage = JournalStorage(JournalFileBackend(str(folder / JOURNAL)))
    if not optuna.get_all_study_names(storage):  # created, nothing appended yet
        return []
    study = optuna.load_study(study_name=None, storage=storage)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [(tuple(sorted(t.params.items())), tuple(t.values)) for t in complete]


def resumed_study(crashed: Path, rerun: Path, clean: dict[str, object]) -> str | None:
    """A resumed search samples anew (dots.search.study.storage.sampler_seed), so its bytes are the
    clean run's only when the crash came after the last trial; otherwise: the trials the crash left
    complete are kept, none is evaluated twice, the study is full, and the export is whole."""
    kept, now = complete_trials(crashed), complete_trials(rerun)
    if missing := [t for t in kept if t not in now]:
        return f"the rerun lost the complete trial(s) {missing}"
    if len(now) != N_TRIALS or len({params for params, _ in now}) != len(now):
        return f"the resumed study holds {len(now)} complete trials, {len({p for p, _ in now})} distinct"
    model = rerun / "run/model"
    digests = json.loads((model / ".dots-output.json").read_text())["digests"]
    files = {p.name for p in model.iterdir()} - {".dots-output.json"}
    sha256 = {name: "sha256:" + hashlib.sha256((model / name).read_bytes()).hexdigest() for name in files}
    if sha256 != digests:
        return "the export does not match its record"
    if len(kept) == N_TRIALS and snapshot(model) != clean["run/model"]:
        return "the study was complete at the crash, yet the export differs from the clean run's"
    return None


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
    protocol = {"write", "fsync"} | ({"rename"} if not command.roots else set())  # a journal only appends
    assert protocol <= kinds  # the protocol's own steps were among the points
    assert report.killed[signal.SIGKILL] == len(report.points)  # every point was reached and ended the run
