"""Final answers out of completions (SPEC §3, §7).

`extract_answer`: the content of the last complete `\\boxed{...}` (or `\\fbox{...}`, or
`\\boxed 5`) with nested and escaped braces; when a text has no box, the fallbacks, in
order: the last "final answer is X" / "the answer is X" / "Answer: X" phrase, then
(opt-in, off by default) the last number — the order of the Qwen2.5-Math evaluation
scripts the DoTS/LUFFY evaluation descends from; the paper itself states none, and its
prompt asks for a box. A text with none of these has no answer (None).
`extract_choice`: the option letter of a multiple-choice completion.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

log = logging.getLogger(__name__)

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
                return text[start + 1 : i], i + 1
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
    return text[cut + len(_THINK_END) :] if cut >= 0 else text


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


def letter_of(candidate: str, letters: str) -> str | None:
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
        letter = letter_of(boxed, letters)
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
    return letter_of(tail, letters) if len(tail.strip()) <= 4 else None
