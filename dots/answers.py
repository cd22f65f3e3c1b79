"""Final answers: extraction, mathematical equivalence, consistency (SPEC §3, §7).

Extraction (`extract_answer`): the content of the last complete `\\boxed{...}` (or
`\\fbox{...}`, or `\\boxed 5`) with nested and escaped braces; when a text has no box, the
fallbacks, in order: the last "final answer is X" / "the answer is X" / "Answer: X"
phrase, then (opt-in, off by default) the last number — the order of the Qwen2.5-Math
evaluation scripts the DoTS/LUFFY evaluation descends from; the paper itself states none,
and its prompt asks for a box. A text with none of these has no answer (None).

Equivalence (`equivalence_classes`): math-verify, each answer parsed once, compared with
one representative per class in both directions (its `verify(gold, target)` is not
symmetric). Identical normalised strings are equal without parsing.

math-verify bounds its time with SIGALRM, which only works on the main thread; off the
main thread (Optuna `n_jobs > 1`, a server thread) the same work runs in a single
helper process (spawned once, reused), on whose main thread the alarms work; if that
process exceeds `POOL_TIMEOUT_S` it is killed and the batch falls back to string
equality. Either way scoring never hangs and never raises from a thread.

Consistency (Eq. 4, SPEC §3): C = max_y (1/m)·#{samples ≡ y}; samples without an answer
count in m but never form the majority; all-no-answer gives 0.
"""
from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Iterable, Sequence

log = logging.getLogger(__name__)

PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5
POOL_TIMEOUT_S = 120.0
FALLBACKS = ("answer_is", "last_number")
DEFAULT_FALLBACKS: tuple[str, ...] = ("answer_is",)

# --- extraction ---------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_THINK_END = "</think>"


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at text[start] == '{', honouring \\{ and \\}."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
        i += 1
    return None  # unclosed: truncated generation


def boxed_answers(text: str) -> list[str]:
    """Contents of every complete `\\boxed{}` / `\\fbox{}` / `\\boxed x` in order."""
    found: list[str] = []
    for match in _BOX_RE.finditer(text):
        i = match.end()
        if i < len(text) and text[i] == "{":
            group = _braced(text, i)
            if group is not None:
                found.append(group[0].strip())
        elif i < len(text) and text[i] == " ":
            token = re.match(r" +([^\s$]+)", text[i:])
            if token:
                found.append(token.group(1).rstrip(".,;"))
    return found


def last_boxed(text: str) -> str | None:
    """The last complete box: the final answer when a solution boxes several values."""
    boxes = boxed_answers(text)
    return boxes[-1] if boxes else None


_ANSWER_IS_RE = re.compile(
    r"(?:final answer is|the answer is|answer is|final answer\s*:|answer\s*:)\s*(.+)",
    re.IGNORECASE,
)
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def _strip_answer(ans: str) -> str:
    ans = ans.strip()
    ans = re.split(r"\.\s|\n", ans, maxsplit=1)[0]
    ans = ans.strip().rstrip(".").strip().strip("$").strip()
    if ans.startswith("\\(") and ans.endswith("\\)"):
        ans = ans[2:-2].strip()
    if ans.startswith("\\[") and ans.endswith("\\]"):
        ans = ans[2:-2].strip()
    return ans.rstrip(".").strip()


def _solution_part(text: str) -> str:
    """The text after the last </think> when there is one (the Solution section)."""
    cut = text.rfind(_THINK_END)
    return text[cut + len(_THINK_END):] if cut >= 0 else text


def extract_answer(text: str | None, fallbacks: Iterable[str] = DEFAULT_FALLBACKS) -> str | None:
    """The final answer of one completion, or None when it states none."""
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed:
        return boxed
    fallbacks = tuple(fallbacks)
    unknown = set(fallbacks) - set(FALLBACKS)
    if unknown:
        raise ValueError(f"unknown answer fallback(s) {sorted(unknown)}; known: {FALLBACKS}")
    tail = _solution_part(text)
    if "answer_is" in fallbacks:
        phrases = list(_ANSWER_IS_RE.finditer(tail))
        if phrases:
            ans = _strip_answer(phrases[-1].group(1))
            if ans:
                return ans
    if "last_number" in fallbacks:
        numbers = _NUMBER_RE.findall(tail)
        if numbers:
            return numbers[-1].replace(",", "")
    return None


# --- multiple choice ----------------------------------------------------------------------

def _letter_of(candidate: str, letters: str) -> str | None:
    text = candidate.strip().strip("$").strip()
    text = re.sub(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}", r"\1", text).strip()
    m = re.fullmatch(rf"\(?([{letters}])\)?(?:[.:)]|\s.*)?", text, re.DOTALL)
    return m.group(1) if m else None


def extract_choice(text: str | None, letters: str = "ABCDEFGHIJ") -> str | None:
    """The chosen option letter of a multiple-choice completion (ARC-C, GPQA, MMLU-Pro)."""
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed:
        letter = _letter_of(boxed, letters)
        if letter:
            return letter
    tail = _solution_part(text)
    phrase = re.compile(
        rf"answer\s*(?:is|:)?\s*[:\-]?\s*(?:option\s*)?\**\s*\(?([{letters}])\)?(?![A-Za-z])",
        re.IGNORECASE,
    )
    hits = [m.group(1) for m in phrase.finditer(tail) if m.group(1).isupper()]
    if hits:
        return hits[-1]
    return _letter_of(tail, letters) if len(tail.strip()) <= 4 else None


# --- equivalence --------------------------------------------------------------------------

def normalize(answer: str) -> str:
    """A cheap canonical string: equal strings are equivalent answers without parsing."""
    s = answer.strip().strip("$")
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""),
                     ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("^{\\circ}", ""), ("^\\circ", "")):
        s = s.replace(old, new)
    s = re.sub(r"\\text\{\s*([^{}]*?)\s*\}", r"\1", s)
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def _parse(answer: str, timeout: int | None):
    from math_verify import LatexExtractionConfig, parse

    try:
        return parse("\\boxed{" + answer + "}", extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
                     parsing_timeout=timeout)
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


# --- consistency and correctness ----------------------------------------------------------

def consistency_of_labels(labels: Sequence[int | str | None]) -> float:
    """max_y (1/m)·#{labels == y} over non-None labels; m counts every sample."""
    m = len(labels)
    counts: dict[int | str, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    return max(counts.values()) / m if counts and m else 0.0


def consistency(
    completions: Sequence[str],
    mode: str = "math",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
    letters: str = "ABCDEFGHIJ",
) -> float:
    """Eq. 4 for the m completions of one query; `mode` math (math-verify) or choice (letters)."""
    if mode == "choice":
        return consistency_of_labels([extract_choice(c, letters) for c in completions])
    if mode != "math":
        raise ValueError(f"consistency mode must be 'math' or 'choice', got {mode!r}")
    answers = [extract_answer(c, fallbacks) for c in completions]
    return consistency_of_labels(equivalence_classes(answers))


def majority_answer(completions: Sequence[str], fallbacks: Iterable[str] = DEFAULT_FALLBACKS) -> str | None:
    """A representative answer of the largest class (first seen among ties)."""
    answers = [extract_answer(c, fallbacks) for c in completions]
    labels = equivalence_classes(answers)
    counts: dict[int, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None
    best = max(counts, key=lambda k: (counts[k], -labels.index(k)))
    return answers[labels.index(best)]


def is_correct(
    completion: str,
    gold: str,
    mode: str = "math",
    fallbacks: Iterable[str] = DEFAULT_FALLBACKS,
    letters: str = "ABCDEFGHIJ",
) -> bool:
    """SPEC §7 correctness: math-verify against the ground truth, letter match for choice."""
    if mode == "choice":
        pred = extract_choice(completion, letters)
        gold_letter = _letter_of(gold, letters) or gold.strip().upper()
        return pred is not None and pred == gold_letter
    pred = extract_answer(completion, fallbacks)
    if pred is None:
        return False
    gold_answer = last_boxed(gold) or gold
    return answers_equivalent(gold_answer, pred)
