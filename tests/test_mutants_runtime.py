"""dots.runtime's process-level helpers called in the pytest process (#49): mutmut credits a test
to a function only when the test calls it in process, and these run at a command's start
(`prepare_command`), in a lock's refusal or in the reaper's watcher process, which other tests
reach through subprocesses only.

- allocator: glibc's `mallopt` / `malloc_trim`, replaced by a stand-in libc that records what it
  was asked (the real ones would change this test process's heap);
- locks: a lock held by a small helper process (POSIX locks are per process), and the refusal's
  message naming its holder;
- progress: the terminal's filter and the held third-party lines, on the real root logger (its
  handlers, the warnings capture and the Hub's logger are restored after each test);
- reaper: `watch` and `descendants` on a real tree of `sh` and `sleep` processes this test
  starts, ended with real signals;
- signals: the SIGTERM handler, with a real SIGTERM to this process (the previous handler is
  put back after).
"""

from __future__ import annotations

import ctypes
import io
import json
import logging
import logging.handlers
import os
import signal
import subprocess
import sys
import threading
import time
import types
import warnings

import pytest
from helpers import alive, start_time

import dots.runtime.allocator as allocator
import dots.runtime.progress as progress
import dots.runtime.reaper as reaper
from dots.errors import DotsError
from dots.runtime.allocator import return_freed_memory, reuse_freed_memory
from dots.runtime.locks import held_by_one
from dots.runtime.progress import log_third_party, quiet_third_party
from dots.runtime.reaper import descendants
from dots.runtime.signals import SIGTERM_EXIT_CODE, exit_on_sigterm, sigterm_deferred

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


# --- allocator: a stand-in libc ------------------------------------------------------------------


class CFunction:
    """A function of the stand-in libc: records each call's arguments and answers the next of
    `results` (the last one again once they run out)."""

    def __init__(self, *results: int) -> None:
        self.results, self.argtypes = list(results), None
        self.calls: list[tuple] = []

    def __call__(self, *args):
        self.calls.append(args)
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]


@pytest.fixture
def libc(monkeypatch):
    """`ctypes.CDLL` answering a stand-in libc (a namespace: give it `mallopt` / `malloc_trim`),
    on Linux, with `reuse_freed_memory` not yet applied in this process."""
    lib = types.SimpleNamespace()
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *args, **kwargs: lib)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(allocator, "_done", False)
    return lib


# glibc's malloc.h: M_TRIM_THRESHOLD is -1, M_MMAP_MAX is -4; 2**31 - 1 = 2147483647, the largest C int
NO_MMAP = (-4, 0)
NEVER_TRIM = (-1, 2147483647)


def test_the_reuse_setting_asks_glibc_for_no_mmap_and_no_trim_once(libc, caplog):
    """`reuse_freed_memory` sets M_MMAP_MAX to 0 and M_TRIM_THRESHOLD to the largest int, says so
    in dots' debug log, and a second call answers True without asking glibc again."""
    libc.mallopt = CFunction(1)  # glibc's mallopt: 1 on success
    caplog.set_level(logging.DEBUG, logger="dots.runtime.allocator")
    assert reuse_freed_memory() is True
    assert libc.mallopt.calls == [NO_MMAP, NEVER_TRIM]
    assert libc.mallopt.argtypes == [ctypes.c_int, ctypes.c_int]
    assert [r.getMessage() for r in caplog.records] == ["glibc malloc: keep freed memory for reuse: True"]
    assert reuse_freed_memory() is True
    assert libc.mallopt.calls == [NO_MMAP, NEVER_TRIM]  # applied once: not asked again


@pytest.mark.parametrize(
    "answers,asked",
    [((0,), [NO_MMAP]), ((1, 0), [NO_MMAP, NEVER_TRIM])],
    ids=["mmap-refused", "trim-refused"],
)
def test_a_refused_setting_is_false_and_tried_again(libc, caplog, answers, asked):
    """glibc refusing either setting (mallopt answers 0) makes it False, stops at the first refusal,
    and the next call tries again (nothing is remembered as applied)."""
    libc.mallopt = CFunction(*answers)
    caplog.set_level(logging.DEBUG, logger="dots.runtime.allocator")
    assert reuse_freed_memory() is False
    assert libc.mallopt.calls == asked
    assert [r.getMessage() for r in caplog.records] == ["glibc malloc: keep freed memory for reuse: False"]
    libc.mallopt.results = [1]
    assert reuse_freed_memory() is True
    assert libc.mallopt.calls == [*asked, NO_MMAP, NEVER_TRIM]


def test_a_libc_without_mallopt_is_left_alone(libc):
    """musl and other C libraries have no `mallopt`: nothing is set, False (and again False)."""
    assert reuse_freed_memory() is False
    assert reuse_freed_memory() is False


def test_returning_freed_memory_is_malloc_trim_of_zero(libc):
    """`return_freed_memory` is `malloc_trim(0)` with a size_t argument: True when glibc released
    pages (1), False when it had none to release (0)."""
    libc.malloc_trim = CFunction(1, 0)
    assert return_freed_memory() is True
    assert libc.malloc_trim.calls == [(0,)]
    assert libc.malloc_trim.argtypes == [ctypes.c_size_t]
    assert return_freed_memory() is False
    assert libc.malloc_trim.calls == [(0,), (0,)]


def test_returning_freed_memory_without_malloc_trim_or_linux_is_false(libc, monkeypatch):
    """A libc without `malloc_trim`, or no glibc at all (not Linux): False, nothing called."""
    assert return_freed_memory() is False
    monkeypatch.setattr(sys, "platform", "darwin")
    libc.malloc_trim = CFunction(1)
    assert return_freed_memory() is False
    assert libc.malloc_trim.calls == []


# --- locks: the refusal names who holds the run ----------------------------------------------------

# holds a POSIX lock on argv[1] until its stdin closes (POSIX locks belong to a process, so this
# process could take its own lock again)
HOLDER = (
    "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX); "
    "print('locked', flush=True); sys.stdin.read()"
)
TAIL = ": wait for it to finish or stop it (several workers on one run: set search.workers and a shared search.storage)"


@pytest.fixture
def utc():
    """Local time is UTC for the test (the holder's start is printed in local time)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture
def held_elsewhere(tmp_path):
    """`hold(text)`: a lock file holding `text`, locked by another process for the test."""
    holders = []

    def hold(text: str):
        path = tmp_path / "run" / ".run.lock"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        proc = subprocess.Popen(
            [sys.executable, "-S", "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        holders.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        return path

    yield hold
    for proc in holders:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(timeout=10)


def test_the_refusal_names_the_holders_pid_host_and_start(held_elsewhere, utc):
    """A second command on a held run stops with the pid, host and start the holder wrote, the start
    in local time to the second (1700000000 s after the epoch is 2023-11-14 22:13:20 UTC)."""
    path = held_elsewhere(json.dumps({"pid": 4242, "host": "node7", "since": 1700000000.75}))
    with pytest.raises(DotsError) as refusal:
        with held_by_one(path, "run directory runs/a"):
            pytest.fail("the lock is held by another process")
    holder = "pid 4242 on node7 (since 2023-11-14 22:13:20)"
    assert str(refusal.value) == f"run directory runs/a is in use by {holder}{TAIL}"


@pytest.mark.parametrize(
    "text",
    ["", '{"pid": 4242, "host": "node7"}', '{"pid": 4242, "host": "node7", "since": null}', '["node7"]'],
    ids=["not-yet-written", "no-since", "since-null", "not-an-object"],
)
def test_a_holder_that_wrote_nothing_usable_is_another_process(held_elsewhere, text):
    """A lock file the holder has not written yet (or written wrongly) still gives the refusal,
    naming 'another process'."""
    path = held_elsewhere(text)
    with pytest.raises(DotsError) as refusal:
        with held_by_one(path, "run directory runs/a"):
            pytest.fail("the lock is held by another process")
    assert str(refusal.value) == f"run directory runs/a is in use by another process{TAIL}"


# --- progress: what the terminal shows, what waits for the log file --------------------------------


@pytest.fixture
def root_logging(monkeypatch):
    """The root logger's handlers, the Hub's and transformers' loggers and progress bars, and the
    warnings capture as they were, after the test; the Hub's progress variable unset for it."""
    import huggingface_hub.utils as hub
    import transformers.utils.logging as tf

    root = logging.getLogger()
    for name in ("huggingface_hub", "transformers"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", list(logger.handlers))
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    handlers, bars = list(root.handlers), (tf.is_progress_bar_enabled(), hub.are_progress_bars_disabled())
    # what a command run earlier in this process left (the merge command's tests call
    # quiet_third_party and log_third_party): the held lines' handler, its log file and lines
    held = progress._HELD
    root.handlers[:] = [h for h in root.handlers if h is not held]
    monkeypatch.setattr(held, "target", None)
    monkeypatch.setattr(held, "buffer", [])
    logging.captureWarnings(False)
    yield root
    logging.captureWarnings(False)
    root.handlers[:] = handlers
    if bars[0]:
        tf.enable_progress_bar()
    if not bars[1]:
        hub.enable_progress_bars()


def terminal_handler(root: logging.Logger) -> tuple[logging.StreamHandler, io.StringIO]:
    """A plain StreamHandler on `root` (what Hydra configures for a command), writing to a string."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root.addHandler(handler)
    return handler, stream


def test_without_a_terminal_handler_one_for_warnings_shows_dots_lines_and_errors(root_logging):
    """A command Hydra did not configure gets one StreamHandler at WARNING whose filter passes
    'dots' and 'dots.*' records at any level and anyone's errors (ERROR and above), nothing else."""
    root = root_logging
    root.handlers[:] = [h for h in root.handlers if type(h) is not logging.StreamHandler]
    before = list(root.handlers)
    quiet_third_party()
    added = [h for h in root.handlers if h not in before]
    terminal = [h for h in added if type(h) is logging.StreamHandler]
    assert len(terminal) == 1 and terminal[0].level == logging.WARNING
    shown = {
        (name, level): bool(terminal[0].filter(logging.makeLogRecord({"name": name, "levelno": level})))
        for name in ("dots", "dots.merge.run", "dotsy", "transformers")
        for level in (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
    }
    for level in (logging.INFO, logging.WARNING):
        assert shown["dots", level] and shown["dots.merge.run", level]
        assert not shown["dotsy", level] and not shown["transformers", level]
    for level in (logging.ERROR, logging.CRITICAL):
        assert shown["dots", level] and shown["dotsy", level] and shown["transformers", level]


def test_a_configured_terminal_shows_only_dots_lines_and_errors(root_logging):
    """Hydra's StreamHandler is kept and filtered (once, however often it is called): dots' warning
    and a library's error reach it, a library's warning does not; pytest's handlers are untouched."""
    root = root_logging
    handler, stream = terminal_handler(root)
    others = {h: list(h.filters) for h in root.handlers if type(h) is not logging.StreamHandler}
    before = list(root.handlers)
    quiet_third_party()
    quiet_third_party()
    assert len(handler.filters) == 1
    assert all(list(h.filters) == filters for h, filters in others.items())
    added = [h for h in root.handlers if h not in before]
    assert len(added) == 1 and isinstance(added[0], logging.handlers.MemoryHandler)  # the held lines' handler
    logging.getLogger("dots.test_terminal").warning("dots' own warning")
    logging.getLogger("some_library").warning("a library's warning")
    logging.getLogger("some_library").error("a library's error")
    assert stream.getvalue().splitlines() == ["dots' own warning", "a library's error"]


def test_other_libraries_lines_and_warnings_wait_for_the_log_file(root_logging, monkeypatch, tmp_path):
    """Other libraries' records and Python warnings are held (not on the terminal) until
    `log_third_party` names the file; they are written there then, and later ones at once;
    dots' own lines never go there."""
    root = root_logging
    _, stream = terminal_handler(root)
    before = list(root.handlers)
    quiet_third_party()
    (held,) = [h for h in root.handlers if h not in before]
    monkeypatch.setattr(held, "target", None)  # (as in a fresh command: no log file named yet)
    monkeypatch.setattr(held, "buffer", [])
    logging.getLogger("some_library").warning("a library's early line")
    logging.getLogger("dots.test_terminal").warning("dots' own line")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's deprecation", UserWarning, stacklevel=1)
    assert stream.getvalue().splitlines() == ["dots' own line"]
    path = tmp_path / "third_party.log"
    assert log_third_party(path) == path
    try:
        early = path.read_text()
        logging.getLogger("some_library").warning("a library's later line")
        later = path.read_text()
    finally:
        held.target.close()
    assert "some_library WARNING a library's early line" in early and "a library's deprecation" in early
    assert "py.warnings WARNING" in early and "dots' own line" not in early
    assert later.startswith(early) and later[len(early) :].endswith("some_library WARNING a library's later line\n")


def test_the_hub_and_transformers_print_through_the_root_logger_without_bars(root_logging, monkeypatch):
    """The Hub's own StreamHandler is removed (other handlers kept) and its records propagate;
    transformers propagates; both libraries' progress bars are off, and so is the Hub's variable."""
    import huggingface_hub.utils as hub
    import transformers.utils.logging as tf

    hub_root = logging.getLogger("huggingface_hub")
    kept = logging.NullHandler()
    hub_root.handlers[:] = [logging.StreamHandler(io.StringIO()), kept]
    hub_root.propagate = False
    logging.getLogger("transformers").propagate = False
    quiet_third_party()
    assert hub_root.handlers == [kept] and hub_root.propagate is True
    assert logging.getLogger("transformers").propagate is True
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert not tf.is_progress_bar_enabled() and hub.are_progress_bars_disabled()


def test_a_users_hub_progress_setting_is_kept(root_logging, monkeypatch):
    """HF_HUB_DISABLE_PROGRESS_BARS already set by the user is left as it is."""
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    quiet_third_party()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"


# --- reaper: a real process tree ------------------------------------------------------------------

# an owner (sh) with a child `sleep` (a), a child `sh` (b) and that one's child `sleep` (c), as
# vLLM's engine core (a child) and its workers (grandchildren); each line names one of them
TREE = r'sleep 60 & echo a $!; sh -c "sleep 60 & echo c \$!; wait" & echo b $!; wait'
# an owner whose child `sleep` (s) ignores SIGTERM, as vLLM's engine core outlived it in tests (reaper.GRACE_S)
STUBBORN = 'trap "" TERM; sleep 60 & echo s $!; exec sleep 60'
# an owner whose child `sh` (b) starts a `sleep` (c) 0.2 s later
LATE = r'sh -c "sleep 0.2; sleep 60 & echo c \$!; wait" & echo b $!; wait'
SETTLE_S = 0.4  # the watcher's first looks at the tree (every 0.02 s) are done by then


class Tree:
    """A process tree started with `sh -c script`: `owner` (a Popen) and `named` (name → pid)."""

    def __init__(self, script: str, names: int) -> None:
        self.owner = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)
        self.named: dict[str, int] = {}
        self.starts: dict[int, int | None] = {}
        self.read(names)

    def read(self, names: int) -> None:
        """Read the next `names` lines ('name pid') the tree prints."""
        assert self.owner.stdout is not None
        for name, pid in (self.owner.stdout.readline().split() for _ in range(names)):
            self.named[name] = int(pid)
            self.starts[int(pid)] = start_time(int(pid))

    def alive(self, name: str) -> bool:
        pid = self.named[name]
        return alive(pid, self.starts[pid])

    def ends(self, name: str, within: float = 5.0) -> bool:
        """Whether `name` is gone within `within` seconds (a SIGKILL is delivered, not awaited)."""
        deadline = time.monotonic() + within
        while self.alive(name) and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.alive(name)

    def kill_owner(self) -> float:
        """SIGKILL the owner (as `kill -9` or the OOM killer would) and reap it; when it was gone."""
        self.owner.kill()
        self.owner.wait()
        return time.monotonic()

    def end(self) -> None:
        """SIGKILL whatever of the tree still runs (these are this test's own processes)."""
        self.owner.kill()
        self.owner.wait()
        if self.owner.stdout is not None:
            self.owner.stdout.close()
        for pid, start in self.starts.items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def trees():
    """`trees(script, names)`: a Tree, ended after the test."""
    started: list[Tree] = []

    def start(script: str, names: int) -> Tree:
        started.append(Tree(script, names))
        return started[-1]

    yield start
    for tree in started:
        tree.end()


def watching(owner: int, grace: float, interval: float = 0.02) -> tuple[threading.Thread, list]:
    """`reaper.watch(owner)` in a thread, looking every `interval` s; (the thread, [its answer] once done)."""
    answer: list[int] = []
    thread = threading.Thread(target=lambda: answer.append(reaper.watch(owner, interval, grace)), daemon=True)
    thread.start()
    return thread, answer


@needs_proc
def test_descendants_are_children_and_grandchildren_with_their_start(trees):
    """`descendants` maps every child and grandchild to its start time (clock ticks, /proc's
    field 22), and leaves out the pids asked about and processes outside their tree."""
    tree = trees(TREE, 3)
    a, b, c = (tree.named[name] for name in "abc")
    assert descendants([tree.owner.pid]) == {a: tree.starts[a], b: tree.starts[b], c: tree.starts[c]}
    assert descendants([b]) == {c: tree.starts[c]}
    assert descendants([a, c]) == {}
    assert descendants([b, a]) == {c: tree.starts[c]}


@needs_proc
def test_the_watcher_ends_the_owners_descendants_when_it_is_killed(trees):
    """While the owner runs nothing is touched; after its `kill -9` the watcher ends the child and
    the grandchild with SIGTERM, without waiting out the grace once they are gone, and answers 3."""
    tree = trees(TREE, 3)
    thread, answer = watching(tree.owner.pid, grace=3.0)
    time.sleep(SETTLE_S)
    assert all(tree.alive(name) for name in "abc") and answer == []  # the owner runs: nothing ended
    gone = tree.kill_owner()
    thread.join(timeout=10)
    took = time.monotonic() - gone
    assert answer == [3]
    assert not any(tree.alive(name) for name in "abc")  # (the watcher waits until SIGTERM ended them)
    assert took < 2.5  # SIGTERM ended them: the 3 s grace was not waited out


@needs_proc
def test_the_watcher_spares_itself_when_it_is_the_owners_child(trees, monkeypatch):
    """The real watcher is a child of its owner (started by it): it never signals itself. Here the
    grandchild plays the watcher (its pid is `os.getpid()`): it stays, the other two end, answer 2."""
    tree = trees(TREE, 3)
    monkeypatch.setattr(os, "getpid", lambda: tree.named["c"])
    thread, answer = watching(tree.owner.pid, grace=2.0)
    time.sleep(SETTLE_S)
    tree.kill_owner()
    thread.join(timeout=10)
    assert answer == [2]
    assert not tree.alive("a") and not tree.alive("b")
    assert tree.alive("c")


@needs_proc
def test_the_watcher_also_ends_what_was_started_since_its_last_look(trees):
    """A grandchild started after the watcher's last look (it looks every 0.6 s here) and before the
    owner's death is found among the recorded child's descendants and ended too: answer 2."""
    tree = trees(LATE, 1)
    thread, answer = watching(tree.owner.pid, grace=2.0, interval=0.6)  # first look at once: b only
    tree.read(1)  # c, 0.2 s later
    tree.kill_owner()
    thread.join(timeout=10)
    assert answer == [2]
    assert not tree.alive("b") and not tree.alive("c")


@needs_proc
def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(trees):
    """A descendant that ignores SIGTERM is sent SIGKILL once the grace (0.3 s) has passed, not
    before, and not much after (the watcher looks every 0.1 s meanwhile)."""
    tree = trees(STUBBORN, 1)
    thread, answer = watching(tree.owner.pid, grace=0.3)
    time.sleep(SETTLE_S)
    gone = tree.kill_owner()
    thread.join(timeout=10)
    took = time.monotonic() - gone
    assert answer == [1] and tree.ends("s")
    # about 0.4 s; the bound leaves a loaded machine 0.85 s more, and still fails a watcher that
    # waited a second past the grace
    assert 0.3 <= took < 1.25


@needs_proc
def test_an_owner_without_descendants_or_already_gone_ends_nothing(trees):
    """An owner that started nothing: 0 once it is gone; an owner gone before the watcher starts: 0
    at once."""
    lone = trees("exec sleep 60", 0)
    thread, answer = watching(lone.owner.pid, grace=2.0)
    time.sleep(SETTLE_S)
    lone.kill_owner()
    thread.join(timeout=10)
    assert answer == [0]
    done = subprocess.Popen(["true"])
    done.wait()
    assert reaper.watch(done.pid, 0.02, 2.0) == 0


# --- signals: SIGTERM as a clean exit ----------------------------------------------------------------

on_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers are the main thread's"
)
MESSAGE = "SIGTERM: stopping (finished work is kept; rerun the same command to resume)"


@pytest.fixture
def sigterm_handler():
    """SIGTERM's handler as it was, after the test."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def sigterm_to_self() -> None:
    """A real SIGTERM to this process, and time for Python to run its handler."""
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100):
        time.sleep(0.001)


@on_main_thread
def test_sigterm_becomes_exit_143_with_a_warning(sigterm_handler, caplog):
    """Installed in the main thread (True), a SIGTERM raises SystemExit(143) (128 + 15) and warns
    that finished work is kept."""
    before = signal.getsignal(signal.SIGTERM)
    assert exit_on_sigterm() is True
    assert signal.getsignal(signal.SIGTERM) is not before  # (else the SIGTERM below would end pytest)
    assert callable(signal.getsignal(signal.SIGTERM))
    caplog.set_level(logging.WARNING, logger="dots.runtime.signals")
    with pytest.raises(SystemExit) as stop:
        sigterm_to_self()
    assert stop.value.code == 143 == SIGTERM_EXIT_CODE
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, MESSAGE)]


@on_main_thread
def test_a_sigterm_inside_bookkeeping_exits_at_its_end(sigterm_handler, caplog):
    """Inside `sigterm_deferred` the SIGTERM is only noted (warned at once); the block finishes and
    the exit (143) comes at its end."""
    assert exit_on_sigterm() is True
    caplog.set_level(logging.WARNING, logger="dots.runtime.signals")
    finished = []
    with pytest.raises(SystemExit) as stop:
        with sigterm_deferred():
            sigterm_to_self()
            assert [r.getMessage() for r in caplog.records] == [MESSAGE]
            finished.append(True)
    assert finished == [True] and stop.value.code == 143


def test_off_the_main_thread_nothing_is_installed(sigterm_handler):
    """Python runs signal handlers in the main thread only: from another thread it answers False
    and SIGTERM's handler is unchanged."""
    before = signal.getsignal(signal.SIGTERM)
    answer = []
    thread = threading.Thread(target=lambda: answer.append(exit_on_sigterm()))
    thread.start()
    thread.join()
    assert answer == [False]
    assert signal.getsignal(signal.SIGTERM) is before
