"""The crash-point enumerator of tests/test_crash_points.py (docs/outputs.md, "What a crash leaves").

A command runs once under the fault injector (tests/crash/faultshim.c, loaded with LD_PRELOAD),
which numbers every write, truncate, create, mkdir, rename, link, delete and fsync it makes under
the work folder — the crash points — and copies the folder just before each one: exactly what a
SIGKILL there leaves (the process's own state dies with it; the page cache is what the copy reads).
For each copy, every output must be the old version or the clean run's new one, byte for byte, and
the same command, rerun on it, must finish with the clean run's bytes and leave no temporary file.
Copies that differ only inside a dead writer's temporaries are one crash state, rerun once. A signal
dots handles (SIGTERM: a clean exit) cannot be copied: the command runs again for each point and is
sent it there, then is checked the same way.

Python, torch and dots are imported once, in a warm runner (tests/cli_runner.py) started under the
injector; each run is a child forked from it (the injector rearmed there with the run's settings), so
a crash point costs the command's own work, not an interpreter's start.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cli_runner import Runner

SHIM_SOURCE = Path(__file__).parent / "crash" / "faultshim.c"
TEMP = re.compile(r"\.(tmp|old|switch)-\d+@[0-9a-f]{4}-[0-9a-f]{6}$")
RECORD = ".dots-output.json"
VOLATILE = ("time",)  # record fields that differ between two runs of one command


def build_shim(folder: Path) -> Path:
    """Compile the injector (cc); the test fails, not skips, where no compiler is found."""
    out = folder / "faultshim.so"
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler: scripts/setup.sh installs one (g++ brings cc)"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SHIM_SOURCE), "-ldl", "-lpthread"], check=True)
    return out


def start(shim: Path) -> Runner:
    """A warm runner (tests/cli_runner.py) with the injector preloaded and composed configurations kept."""
    return Runner({"LD_PRELOAD": str(shim), "DOTS_RUNNER_KEEP_COMPOSED": "1", "DOTS_PROGRESS": "0"})


def run(runner: Runner, command: Command, work: Path, log: Path, **env: str) -> int:
    """One run of `command` in `work`; its exit code (negative: the signal that ended it), its output in `log`."""
    reply = runner.run(command.module, command.args, str(work), **env)
    log.write_text(reply["stdout"] + reply["stderr"])
    return int(reply["rc"])


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under `folder` (or the file `folder`) with its bytes (a record without its volatile
    fields); None if absent."""
    if not folder.exists():
        return None
    files = {}
    for path in [folder] if folder.is_file() else sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == RECORD:
                record = json.loads(data)
                data = json.dumps({k: v for k, v in record.items() if k not in VOLATILE}, sort_keys=True).encode()
            files[path.relative_to(folder).as_posix() if path != folder else path.name] = data
    return files


def crash_state(folder: Path) -> str:
    """What a rerun can see of a crashed run: every path (a dead writer's temporary names without
    their pid and random part) and the bytes of every file outside those temporaries. Two crash
    points with one state are one state to rerun from: the rerun removes temporaries unread."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        inside = any(TEMP.search(part) for part in rel.split("/")[:-1])
        if inside:
            continue
        h.update(TEMP.sub(lambda m: "." + m.group(1), rel).encode() + b"\0")
        if path.is_file() and not TEMP.search(path.name):
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def leftovers(folder: Path) -> list[str]:
    """The temporary names of dots' commit protocol anywhere under `folder`."""
    return sorted(str(p) for p in folder.rglob("*") if TEMP.search(p.name))


@dataclass
class Command:
    """One command of a crash-point test: `module` and `args` run in the work folder after the
    commands `before` (module, args) made the state it starts from; `outputs` are the folders compared."""

    name: str
    module: str
    args: list[str]
    outputs: list[str]
    before: list[tuple[str, list[str]]] = field(default_factory=list)
    signals: tuple[int, ...] = ()  # handled signals sent for real at each point (SIGKILL: by snapshot)
    compare: Callable[[str, dict[str, bytes]], dict[str, bytes]] = field(default=lambda name, files: files)
    growing: tuple[str, ...] = ()  # outputs that grow entry by entry (a cache root): compared per entry
    roots: tuple[str, ...] = ()  # the files whose changes are the crash points (none: all of the work folder)
    stale: tuple[str, ...] = ()  # what a dead writer leaves that only a timeout clears: removed before a rerun
    # the rerun's check when it cannot reproduce the clean run's bytes (a resumed study samples anew):
    # (the crashed folder, the rerun's folder, the clean run's outputs) -> what is wrong, or None
    rerun_check: Callable[[Path, Path, dict[str, object]], str | None] | None = None


@dataclass
class Report:
    command: str
    points: list[str] = field(default_factory=list)  # "KIND PATH" per crash point, in order
    killed: dict[int, int] = field(default_factory=dict)  # signal -> points where it ended the command
    failures: list[str] = field(default_factory=list)
    reruns: int = 0  # distinct crash states rerun from

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for point in self.points:
            kind = point.split()[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        per_kind = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        ends = ", ".join(f"{signal.Signals(s).name} {n}" for s, n in self.killed.items())
        return (
            f"{self.command}: {len(self.points)} crash points ({per_kind}); ended by {ends}; "
            f"{self.reruns} distinct crash states, each rerun to completion"
        )


def enumerate_crashes(server: Runner, command: Command, work: Path, scratch: Path) -> Report:
    """Run `command` once, copying the work folder before each crash point (what a SIGKILL there
    leaves); check each copy and rerun from each distinct one; then, for a handled signal (SIGTERM),
    run the command again per point and send it there (see the module)."""
    report = Report(command.name)
    pristine, snapshots = scratch / f"{command.name}.before", scratch / f"{command.name}.snapshots"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for module, args in command.before:
        reply = server.run(module, args, str(work))
        assert reply["rc"] == 0, reply["stderr"][-3000:]
    shutil.copytree(work, pristine, symlinks=True)
    old = _state(command, work)
    ops, log = scratch / f"{command.name}.ops", scratch / f"{command.name}.log"
    snapshots.mkdir()
    points = ":".join(str(work / r) for r in command.roots) or str(work)
    roots = {"DOTS_FAULT_ROOTS": points, "DOTS_FAULT_COPY": str(work)}
    code = run(server, command, work, log, **roots, DOTS_FAULT_LOG=str(ops), DOTS_FAULT_SNAPSHOT=str(snapshots))
    assert code == 0, f"{command.name}: the clean run failed ({code}):\n{log.read_text()[-3000:]}"
    new = _state(command, work)
    assert new != old, f"{command.name}: the clean run changed nothing"
    report.points = [line.split(" ", 1)[1] for line in ops.read_text().splitlines()]
    rerun: set[str] = set()  # the crash states already rerun from

    def check(crashed: Path, where: str) -> None:
        now = _state(command, crashed)
        for o in command.outputs:
            whole = now[o] in (old[o], new[o])
            if o in command.growing and isinstance(now[o], dict):  # each entry absent, old or new
                before, after = old[o] or {}, new[o] or {}
                whole = all(v in (before.get(k), after.get(k)) for k, v in now[o].items())  # type: ignore[union-attr]
            if not whole:
                report.failures.append(f"{where}: {o} is neither the old version nor the new one")
        for name in command.stale:
            (crashed / name).unlink(missing_ok=True)
        seen = crash_state(crashed)
        if seen in rerun:
            return
        rerun.add(seen)
        report.reruns += 1
        if crashed != work:
            shutil.rmtree(work)
            shutil.copytree(crashed, work, symlinks=True)
        code = run(server, command, work, log)
        if code != 0:
            report.failures.append(f"{where}: the rerun failed ({code}): {log.read_text()[-600:]}")
        elif command.rerun_check and (wrong := command.rerun_check(crashed, work, new)):
            report.failures.append(f"{where}: {wrong}")
        elif not command.rerun_check and _state(command, work) != new:
            report.failures.append(f"{where}: the rerun's outputs differ from the clean run's")
        elif left := leftovers(work):
            report.failures.append(f"{where}: the rerun left {left[0]}")

    for point, what in enumerate(report.points, 1):
        check(snapshots / str(point), f"{command.name}, SIGKILL at point {point} ({what})")
        shutil.rmtree(snapshots / str(point))
    report.killed[signal.SIGKILL] = len(report.points)
    for sig in command.signals:
        ended = 0
        for point, what in enumerate(report.points, 1):
            shutil.rmtree(work)
            shutil.copytree(pristine, work, symlinks=True)
            code = run(server, command, work, log, **roots, DOTS_FAULT_AT=str(point), DOTS_FAULT_SIGNAL=str(int(sig)))
            ended += code != 0
            check(work, f"{command.name}, {signal.Signals(sig).name} at point {point} ({what})")
        report.killed[sig] = ended
    return report


def _state(command: Command, folder: Path) -> dict[str, object]:
    """The compared outputs of `command` under `folder`: an output replaced whole as its files; a
    growing one (a cache root) as each of its entries' files, temporaries and locks aside."""
    state: dict[str, object] = {}
    for output in command.outputs:
        files = snapshot(folder / output)
        if files is not None and output in command.growing:
            entries = {p.name for p in (folder / output).iterdir() if not TEMP.search(p.name) and p.suffix != ".lock"}
            state[output] = {e: snapshot(folder / output / e) for e in sorted(entries)}
        else:
            state[output] = None if files is None else command.compare(output, files)
    return state
