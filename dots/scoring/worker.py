"""The math-verify helper process: every LaTeX comparison runs here, under a time limit.

Why a process: sympy runs for minutes on adversarial LaTeX (`9^{9^{9^{9}}}`, `(10^{9})!`),
possibly inside one C call that no signal interrupts, and math-verify's own SIGALRM
timeouts work only on the main thread. So
comparisons run in one helper process (`python -m dots.scoring.worker`, started once per
process and reused; a plain subprocess, so the caller's `__main__` is never re-imported),
which bounds each comparison twice:

- soft: a SIGALRM timer of `COMPARE_TIMEOUT_S` around each comparison (parses included)
  in the helper's main thread, raising a BaseException (math-verify and sympy swallow
  Exception) and repeating every 0.25 s until it gets through; the answers are then not
  equivalent;
- hard: the caller waits at most `HARD_TIMEOUT_S` for the reply; past that it kills the
  helper (a hang in C, a memory blow-up), counts the pair as not equivalent, and starts a
  new helper for the next comparison. The helper's address space is capped at
  `MEMORY_LIMIT_BYTES`.

A comparison: both answers parsed (once per answer, cached); two plain expressions over
the same symbols that differ clearly at a rational point are unequal without sympy's
`simplify` (most of the cost of a "no"); else `verify(a, b)`, and `verify(b, a)` only for
relations, sets and tuples, the only objects on which math-verify is not symmetric.

Protocol: one JSON line per request on stdin, `[a, b, timeout_s]` (LaTeX strings), one
line `1` / `0` per reply on the original stdout (`t`: stopped by the time limit, not equivalent);
`ready` once math-verify is imported.
"""

from __future__ import annotations

import json
import logging
import math
import os
import select
import subprocess
import sys
import threading
import time

__all__ = ["COMPARE_TIMEOUT_S"]

log = logging.getLogger(__name__)

COMPARE_TIMEOUT_S = 5.0
HARD_TIMEOUT_S = 20.0
STARTUP_TIMEOUT_S = 300.0  # importing sympy on a loaded 2-core machine
MEMORY_LIMIT_BYTES = 4 << 30


# --- inside the helper process ------------------------------------------------------------


class _Alarm(BaseException):
    """Not an Exception: math-verify and sympy catch Exception and would carry on."""


def _serve() -> None:  # pragma: no cover - runs in the helper process
    import resource
    import signal

    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not break the protocol
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ValueError, OSError):
        pass
    logging.basicConfig(level=logging.ERROR)
    from math_verify import LatexExtractionConfig, parse, verify
    from sympy import And, Expr, Rational, Set, Tuple, UnevaluatedExpr
    from sympy.core.relational import Relational

    directional = (Relational, And, Set, Tuple)  # where verify(gold, target) is not symmetric

    def differ_at_a_point(pa, pb) -> bool:
        """True when two plain expressions over the same symbols take clearly different values
        at a rational point (then they are not equal, and sympy's simplify, most of the cost of a
        "no", is skipped). Anything else (sets, relations, other symbols, a pole): False."""
        if not (isinstance(pa, Expr) and isinstance(pb, Expr)) or pa.free_symbols != pb.free_symbols:
            return False
        if pa.has(UnevaluatedExpr) or pb.has(UnevaluatedExpr):  # math-verify's percent: 9% ≡ 9
            return False
        symbols = sorted(pa.free_symbols, key=str)
        if len(symbols) > 8:
            return False
        for k in range(2):
            point = {x: Rational(7 + 4 * i + k, 11 + 3 * i + 2 * k) for i, x in enumerate(symbols)}
            try:
                va, vb = complex(pa.evalf(30, subs=point)), complex(pb.evalf(30, subs=point))
            except Exception:  # not a number there (undefined function, nan, zoo): undecided
                return False
            if not all(map(math.isfinite, (va.real, va.imag, vb.real, vb.imag))):
                return False
            if abs(va - vb) > 1e-6 * max(1.0, abs(va), abs(vb)):  # math-verify's floats: 6 decimals
                return True
        return False

    config = [LatexExtractionConfig(boxed_match_priority=0)]
    cache: dict[str, object] = {}

    def on_alarm(signum, frame):
        raise _Alarm()

    signal.signal(signal.SIGALRM, on_alarm)

    def parsed(latex: str):
        if latex not in cache:
            if len(cache) > 50_000:
                cache.clear()
            got = parse("\\boxed{" + latex + "}", extraction_config=config, parsing_timeout=None)
            cache[latex] = got[0] if got else None  # the sympy object (got[1] is the string)
        return cache[latex]

    def equal(a: str, b: str) -> bool:
        pa, pb = parsed(a), parsed(b)
        if pa is None or pb is None:
            return False
        kw = {"timeout_seconds": None}
        if differ_at_a_point(pa, pb):
            return False
        if verify(pa, pb, **kw):
            return True
        # the other direction only where it can differ: it doubles the cost of a "no"
        if not (isinstance(pa, directional) or isinstance(pb, directional)):
            return False
        return bool(verify(pb, pa, **kw))

    out.write("ready\n")
    for line in sys.stdin:
        a, b, timeout = json.loads(line)
        if timeout > 0:  # repeats, in case some code swallows one alarm
            signal.setitimer(signal.ITIMER_REAL, float(timeout), 0.25)
        reply = "0"
        try:
            reply = "1" if equal(a, b) else "0"
        except _Alarm:  # the time limit: not equivalent, and the caller counts it
            reply = "t"
        except BaseException:  # MemoryError, RecursionError, sympy's own errors
            reply = "0"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out.write(reply + "\n")


# --- in the caller ------------------------------------------------------------------------


class Helper:
    """The caller's handle on the helper process; thread-safe, one comparison at a time; a
    forked child starts a helper of its own (the parent's pipes are the parent's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pid = os.getpid()
        self.kills = 0  # comparisons stopped by killing the helper (past the hard deadline)
        self.timeouts = 0  # comparisons stopped by the helper's own alarm

    def _start(self) -> subprocess.Popen:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dots.scoring.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            env=dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1"),
        )
        if self._readline(proc, STARTUP_TIMEOUT_S) != "ready":
            self._kill(proc)
            raise RuntimeError("the math-verify helper process did not start")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen, timeout: float) -> str | None:
        """One reply line, or None when none comes within `timeout` s or the helper died."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        data = b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            data += chunk
        return data.decode().strip()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def equal(self, a: str, b: str, timeout: float = COMPARE_TIMEOUT_S, hard_timeout: float | None = None) -> bool:
        """math-verify equivalence of two LaTeX answers, either direction; False on timeout.

        `timeout`: the helper's own alarm (0: none); `hard_timeout` (default
        max(HARD_TIMEOUT_S, 2·timeout)): past it the helper is killed."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's pipes are not ours
                self._proc, self._pid = None, os.getpid()
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            start = time.monotonic()
            try:
                data = memoryview((json.dumps([a, b, timeout]) + "\n").encode())
                while data:
                    data = data[proc.stdin.write(data) or 0 :]
                reply = self._readline(proc, hard_timeout or max(HARD_TIMEOUT_S, 2 * timeout))
            except (BrokenPipeError, OSError):
                reply = None
            if reply in ("0", "1"):
                return reply == "1"
            if reply == "t":
                self.timeouts += 1
                log.info("math-verify comparison past its %.1f s limit; not equivalent: %.80r vs %.80r", timeout, a, b)
                return False
            self.kills += 1
            self._kill(proc)
            self._proc = None
            log.warning(
                "math-verify comparison stopped after %.1f s (helper killed); not equivalent: %.80r vs %.80r",
                time.monotonic() - start,
                a,
                b,
            )
            return False

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._pid == os.getpid():
                self._kill(self._proc)
                self._proc = None


if __name__ == "__main__":  # pragma: no cover
    # the importable module's function, not this __main__ copy of it: a mutation test swaps
    # functions by their module's name (docs/testing.md), and this one runs only here
    from dots.scoring import worker

    worker._serve()
