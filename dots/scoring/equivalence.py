"""Mathematical equivalence of answers (math-verify), as equivalence classes.

`equivalence_classes`: each answer parsed once, compared with one representative per
class in both directions (math-verify's `verify(gold, target)` is not symmetric).
Identical normalised strings are equal without parsing.

math-verify bounds its time with SIGALRM, which only works on the main thread; off the
main thread (Optuna `n_jobs > 1`, a server thread) the same work runs in a single
helper process (spawned once, reused), on whose main thread the alarms work; if that
process exceeds `POOL_TIMEOUT_S` it is killed and the batch falls back to string
equality. Either way scoring never hangs and never raises from a thread.
"""

from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Sequence

log = logging.getLogger(__name__)

PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5
POOL_TIMEOUT_S = 120.0


def normalize(answer: str) -> str:
    """A cheap canonical string: equal strings are equivalent answers without parsing."""
    s = answer.strip().strip("$")
    for old, new in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
    ):
        s = s.replace(old, new)
    s = re.sub(r"\\text\{\s*([^{}]*?)\s*\}", r"\1", s)
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def _parse(answer: str, timeout: int | None):
    from math_verify import LatexExtractionConfig, parse

    try:
        return parse(
            "\\boxed{" + answer + "}",
            extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
            parsing_timeout=timeout,
        )
    except Exception:  # math-verify raises on odd input and on timeouts
        return []


def _verify(a, b, timeout: int | None) -> bool:
    from math_verify import verify

    if not a or not b:
        return False
    try:
        return bool(verify(a, b, timeout_seconds=timeout)) or bool(verify(b, a, timeout_seconds=timeout))
    except Exception:
        return False


def _classes_here(answers: Sequence[str | None]) -> list[int | None]:
    """Class label per answer (None for no answer); runs math-verify in this thread."""
    on_main = threading.current_thread() is threading.main_thread()
    p_timeout = PARSE_TIMEOUT_S if on_main else None
    v_timeout = VERIFY_TIMEOUT_S if on_main else None
    labels: list[int | None] = []
    reps: list[tuple[str, object]] = []  # (normalised, parsed) per class
    by_norm: dict[str, int] = {}
    parsed_cache: dict[str, object] = {}
    for ans in answers:
        if ans is None or not str(ans).strip():
            labels.append(None)
            continue
        norm = normalize(str(ans))
        if norm in by_norm:
            labels.append(by_norm[norm])
            continue
        if norm not in parsed_cache:
            parsed_cache[norm] = _parse(str(ans), p_timeout)
        parsed = parsed_cache[norm]
        label = next((k for k, (_, rep) in enumerate(reps) if _verify(rep, parsed, v_timeout)), None)
        if label is None:
            label = len(reps)
            reps.append((norm, parsed))
        by_norm[norm] = label
        labels.append(label)
    return labels


def _classes_by_string(answers: Sequence[str | None]) -> list[int | None]:
    ids: dict[str, int] = {}
    out: list[int | None] = []
    for ans in answers:
        if ans is None or not str(ans).strip():
            out.append(None)
        else:
            out.append(ids.setdefault(normalize(str(ans)), len(ids)))
    return out


_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        import multiprocessing

        _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    return _pool


def _kill_pool() -> None:
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)


def equivalence_classes(answers: Sequence[str | None]) -> list[int | None]:
    """Label each answer with its math-verify equivalence class (None: no answer)."""
    if threading.current_thread() is threading.main_thread():
        return _classes_here(answers)
    if all(a is None for a in answers):
        return [None] * len(answers)
    with _pool_lock:  # one helper process, one batch at a time
        try:
            return _get_pool().submit(_classes_here, list(answers)).result(timeout=POOL_TIMEOUT_S)
        except FutureTimeout:
            log.warning("math-verify helper exceeded %.0f s; falling back to string equality", POOL_TIMEOUT_S)
            _kill_pool()
        except Exception as exc:  # broken pool (killed, cannot spawn): string equality
            log.warning("math-verify helper failed (%s); falling back to string equality", exc)
            _kill_pool()
    return _classes_by_string(answers)


def answers_equivalent(a: str | None, b: str | None) -> bool:
    labels = equivalence_classes([a, b])
    return labels[0] is not None and labels[0] == labels[1]
