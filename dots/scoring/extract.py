"""Final answers out of completions (docs/method.md §3, §7; DoTS App. A.4 asks for `\\boxed{}`).

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

A phrase's answer is the `$…$` / `\\(…\\)` / box it opens with, else the text up to the end
of the sentence or clause: "The answer is: 3/4." → `3/4`; "the answer
is 5, because of symmetry." → `5`; `**5**` → `5`. An empty box is no answer anywhere
(never the literal `\\boxed{}`). A text with none of these has no answer (None).
An answer of several parts is kept whole in every wrapper: spans or boxes separated only by
`,` `;` "and" (OlympiadBench's `<answer>$69$,$84$</answer>`, `\\boxed{69}, \\boxed{84}`,
"The answer is $69$, $84$.") are read as the list `69, 84`; an `<answer>` whose spans carry
a qualification with math in it ("$f(x)=ax+b$, where $b$ is an integer") is read whole.
`extract_choice`: the option letter of a multiple-choice completion, by the same order.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

__all__ = ["DEFAULT_FALLBACKS", "boxed_answers", "extract_answer", "extract_choice", "final_boxes", "clean_phrase"]

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
# what may part the spans or boxes of one answer of several parts: `$69$,$84$`, `\\boxed{1} and \\boxed{2}`
_JOIN = r"(?:[,;]|and\b|&|\\quad|\\qquad|\\text\{\s*and\s*\}|\\\\)"
_BOX_GAP_RE = re.compile(rf"(?:[\s$]|\\[()]|{_JOIN})*", re.IGNORECASE)
_MATH_OPEN_RE = re.compile(r"(?<!\\)\$|\\\(|\\boxed")
_SPAN_GAP_RE = re.compile(rf"\s*{_JOIN}(?:\s*{_JOIN})*\s*", re.IGNORECASE)


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


def _boxes(text: str) -> list[tuple[str, int, int]]:
    """(content, start, end) of every complete `\\boxed{}` / `\\fbox{}` / `\\boxed x`, in order."""
    found: list[tuple[str, int, int]] = []
    for match in _BOX_RE.finditer(text):
        i = match.end()
        if i < len(text) and text[i] == "{":
            group = _braced(text, i)
            if group is not None:
                found.append((group[0].strip(), match.start(), group[1]))
        elif i < len(text) and text[i] == " ":
            token = re.match(r" +([^\s$]+)", text[i:])
            if token:
                found.append((token.group(1).rstrip(".,;"), match.start(), i + token.end()))
    return found


def boxed_answers(text: str) -> list[str]:
    """Contents of every complete `\\boxed{}` / `\\fbox{}` / `\\boxed x` in order (empty ones too)."""
    return [content for content, _, _ in _boxes(text)]


def last_boxed(text: str) -> str | None:
    """The last complete non-empty box: the final answer when a solution boxes several values."""
    boxes = [b for b in boxed_answers(text) if b]
    return boxes[-1] if boxes else None


def final_boxes(text: str) -> str | None:
    """The last non-empty box, with the boxes just before it that only separators part from it
    (`\\boxed{69}, \\boxed{84}`: one answer of two parts, read `69, 84`); None without a box."""
    boxes = [b for b in _boxes(text) if b[0]]
    if not boxes:
        return None
    run = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        if not _BOX_GAP_RE.fullmatch(text[box[2] : run[0][1]]):
            break
        run.insert(0, box)
    return ", ".join(content for content, _, _ in run)


# --- phrases ------------------------------------------------------------------------------


def _math_span(text: str) -> tuple[str, int] | None:
    """(content, end) of the math span or box `text` opens with; content "" when it is empty."""
    box = _BOX_RE.match(text)
    if box:
        boxes = _boxes(text)
        if boxes and boxes[0][1] == 0:
            return boxes[0][0], boxes[0][2]
        return "", len(text)  # unclosed or empty: no answer here
    for left, right in _MATH_SPANS:
        if text.startswith(left):
            close = re.compile(r"(?<!\\)" + re.escape(right))  # `\$` inside is a dollar sign
            end = close.search(text, len(left))
            if end:
                return text[len(left) : end.start()].strip(), end.end()
    return None


def _span_run(text: str) -> tuple[str, int] | None:
    """(contents, end) of the math spans / boxes `text` opens with: one span, or several that
    only separators part (`$69$,$84$` → `69, 84`); None when text opens with none."""
    first = _math_span(text)
    if first is None:
        return None
    parts, end = [first[0]], first[1]
    while True:
        gap = _SPAN_GAP_RE.match(text, end)
        nxt = _math_span(text[gap.end() :]) if gap else None
        if gap is None or nxt is None or not nxt[0] or not parts[-1]:
            break
        parts.append(nxt[0])
        end = gap.end() + nxt[1]
    return ", ".join(parts), end


def clean_phrase(text: str) -> str | None:
    """The answer stated at the start of `text` (what follows "the answer is"), or None."""
    s = re.sub(r"^(?:[:=]|-(?=\s))+\s*", "", text.strip())  # "is: 3/4", not the sign of "is -5"
    s = re.sub(r"^\*\*\s*(.*?)\s*\*\*", r"\1", s)  # markdown bold
    run = _span_run(s)
    if run is not None:
        return run[0].rstrip(".").strip() or None
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
    inner = final_boxes(content) or _answer_is(content)
    if inner:
        return inner
    run = _span_run(content)
    if run is not None:
        if _MATH_OPEN_RE.search(content, run[1]):  # "$f(x)=ax+b$, where $b$ is …": all of it
            return content.rstrip(".").strip()
        return run[0] or None
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
    ans = _answer_tag(solution) or final_boxes(solution)
    if ans is None and "answer_is" in fallbacks:
        ans = _answer_is(solution)
    if ans is None and "last_number" in fallbacks:
        numbers = _NUMBER_RE.findall(solution)
        ans = numbers[-1].replace(",", "") if numbers else None
    return ans if ans is not None else final_boxes(thinking)


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
