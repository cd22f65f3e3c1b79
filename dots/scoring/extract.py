"""Final answers out of completions (SPEC §3, §7; DoTS App. A.4 asks for `\\boxed{}`).

`extract_answer` reads, in order, from the Solution part of a completion (the text after
its last `</think>`, or all of it when there is none):
1. the last complete `<answer>…</answer>` (the format of the official DoTS code and of
   LUFFY/R1-style prompts): a box inside it, else an "answer is" phrase inside it, else
   its whole content;
2. the last non-empty `\\boxed{…}` / `\\fbox{…}` / `\\boxed 5` (nested and escaped braces);
3. fallbacks, in order: the last "final answer is X" / "the answer is X" / "Answer: X"
   phrase (`answer_is`, on by default), then the last number (`last_number`, opt-in) —
   the order of the Qwen2.5-Math evaluation scripts the DoTS/LUFFY evaluation descends
   from; the paper states none.
Only when the Solution states nothing is the last non-empty box of the thinking used: a
final "The answer is 5" beats a box the model drafted inside `<think>`.

A phrase's answer is its first `$…$` / `\\(…\\)` / box when it opens with one, else the
text up to the end of the sentence or clause: "The answer is: 3/4." → `3/4`; "the answer
is 5, because of symmetry." → `5`; `**5**` → `5`. An empty box is no answer anywhere
(never the literal `\\boxed{}`). A text with none of these has no answer (None).
`extract_choice`: the option letter of a multiple-choice completion, by the same order.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

log = logging.getLogger(__name__)

FALLBACKS = ("answer_is", "last_number")
DEFAULT_FALLBACKS: tuple[str, ...] = ("answer_is",)

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_THINK_END = "</think>"
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_IS_RE = re.compile(
    r"(?:final answer is|the answer is|answer is|final answer\s*:|answer\s*:)\s*(.+)",
    re.IGNORECASE,
)
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
# where a plain-text answer ends: a sentence end, or a clause that starts with a word
_CLAUSE_END_RE = re.compile(
    r"\.(?=\s|$)|[,;]\s+(?!and\b|or\b)(?=[A-Za-z]{2,}\b)"
    r"|\s+(?=(?:because|since|as|so|which|where|when|if|but|for|thus|hence)\b)",
    re.IGNORECASE,
)
_MATH_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


# --- boxes --------------------------------------------------------------------------------


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
    """Contents of every complete `\\boxed{}` / `\\fbox{}` / `\\boxed x` in order (empty ones too)."""
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
    """The last complete non-empty box: the final answer when a solution boxes several values."""
    boxes = [b for b in boxed_answers(text) if b]
    return boxes[-1] if boxes else None


# --- phrases ------------------------------------------------------------------------------


def _math_span(text: str) -> str | None:
    """The content of the math span or box `text` opens with; "" when it is empty."""
    box = _BOX_RE.match(text)
    if box:
        if text[box.end() : box.end() + 1] == "{":
            group = _braced(text, box.end())
            return group[0].strip() if group else ""
        boxes = boxed_answers(text)
        return boxes[0] if boxes else ""
    for left, right in _MATH_SPANS:
        if text.startswith(left):
            close = re.compile(r"(?<!\\)" + re.escape(right))  # `\$` inside is a dollar sign
            end = close.search(text, len(left))
            if end:
                return text[len(left) : end.start()].strip()
    return None


def clean_phrase(text: str) -> str | None:
    """The answer stated at the start of `text` (what follows "the answer is"), or None."""
    s = re.sub(r"^(?:[:=]|-(?=\s))+\s*", "", text.strip())  # "is: 3/4", not the sign of "is -5"
    s = re.sub(r"^\*\*\s*(.*?)\s*\*\*", r"\1", s)  # markdown bold
    span = _math_span(s)
    if span is not None:
        return span.rstrip(".").strip() or None
    cut = _CLAUSE_END_RE.search(s)
    s = (s[: cut.start()] if cut else s).split("\n", 1)[0]
    s = s.strip().strip("*").strip().rstrip(".,;").strip().strip("$").strip()
    return s or None


def _answer_is(text: str) -> str | None:
    for phrase in reversed(list(_ANSWER_IS_RE.finditer(text))):
        stated = phrase.group(1)
        while inner := _ANSWER_IS_RE.search(stated):  # "Final Answer: The final answer is $x$"
            stated = inner.group(1)
        ans = clean_phrase(stated)
        if ans:
            return ans
    return None


def _answer_tag(text: str) -> str | None:
    tags = [m.group(1).strip() for m in _ANSWER_TAG_RE.finditer(text)]
    tags = [t for t in tags if t]
    if not tags:
        return None
    content = tags[-1]
    inner = last_boxed(content) or _answer_is(content)
    if inner:
        return inner
    span = _math_span(content)
    if span is not None:
        return span or None
    return content.rstrip(".").strip() or None


def _split_think(text: str) -> tuple[str, str]:
    """(thinking, solution): around the last </think>; no </think>: ("", text)."""
    cut = text.rfind(_THINK_END)
    return (text[:cut], text[cut + len(_THINK_END) :]) if cut >= 0 else ("", text)


def extract_answer(text: str | None, fallbacks: Iterable[str] = DEFAULT_FALLBACKS) -> str | None:
    """The final answer of one completion, or None when it states none (module docstring)."""
    fallbacks = tuple(fallbacks)
    unknown = set(fallbacks) - set(FALLBACKS)
    if unknown:
        raise ValueError(f"unknown answer fallback(s) {sorted(unknown)}; known: {FALLBACKS}")
    if not text:
        return None
    thinking, solution = _split_think(text)
    ans = _answer_tag(solution) or last_boxed(solution)
    if ans is None and "answer_is" in fallbacks:
        ans = _answer_is(solution)
    if ans is None and "last_number" in fallbacks:
        numbers = _NUMBER_RE.findall(solution)
        ans = numbers[-1].replace(",", "") if numbers else None
    return ans if ans is not None else last_boxed(thinking)


# --- multiple choice ----------------------------------------------------------------------


def letter_of(candidate: str, letters: str) -> str | None:
    text = candidate.strip().strip("$").strip()
    text = re.sub(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}", r"\1", text).strip()
    m = re.fullmatch(rf"\(?([{letters}])\)?(?:[.:)]|\s.*)?", text, re.DOTALL)
    return m.group(1) if m else None


def _choice_in(part: str, letters: str, tail_ok: bool) -> str | None:
    tags = [m.group(1).strip() for m in _ANSWER_TAG_RE.finditer(part)]
    for tag in reversed([t for t in tags if t]):
        letter = letter_of(last_boxed(tag) or tag, letters) or _choice_in(tag, letters, False)
        if letter:
            return letter
    boxed = last_boxed(part)
    if boxed:
        letter = letter_of(boxed, letters)
        if letter:
            return letter
    phrase = re.compile(
        rf"answer\s*(?:is|:)?\s*[:\-]?\s*(?:option\s*)?\**\s*\(?([{letters}])\)?(?![A-Za-z])",
        re.IGNORECASE,
    )
    hits = [m.group(1) for m in phrase.finditer(part) if m.group(1).isupper()]
    if hits:
        return hits[-1]
    return letter_of(part, letters) if tail_ok and len(part.strip()) <= 4 else None


def extract_choice(text: str | None, letters: str = "ABCDEFGHIJ") -> str | None:
    """The chosen option letter of a multiple-choice completion (ARC-C, GPQA, MMLU-Pro)."""
    if not text:
        return None
    thinking, solution = _split_think(text)
    letter = _choice_in(solution, letters, tail_ok=True)
    if letter is None and thinking:
        boxed = last_boxed(thinking)
        letter = letter_of(boxed, letters) if boxed else None
    return letter
