"""Answer strings before comparison: a cheap canonical form, the LaTeX math-verify parses,
and the set-versus-tuple shape (docs/method.md §3, §7).

- `normalize`: equal results are the same answer without parsing (whitespace, `$`,
  `\\left`/`\\right`, `\\dfrac`, `^\\circ`, `\\text{}` wrappers, `\\%` vs `%` do not matter).
- `to_latex`: what math-verify is given. It fixes what its LaTeX parser gets wrong on the
  benchmarks' golds: e-notation `4.4e7` → `4.4\\times10^{7}` (else 4.4·e·7), a bare `%`
  (a LaTeX comment) → `\\%`, numpy-style `-1./3` and `np.arcsin`, every `$` delimiter
  (OlympiadBench writes `$69$,$84$`), and a subscripted `E_1` / `e_1` (parsed as a partial
  expression, so that `\\frac13 E_1+\\frac23 E_2` ≡ `\\frac23 E_1+\\frac23 E_2`) →
  `\\mathcal{E}_1`.
- `shape`: `set` for `\\{…\\}`, `tuple` for a bracketed list `(a, b)` / `[a, b]`, else
  `other`. A set is never the same answer as a tuple or interval (deliberate; math-verify
  equates `\\{1,2\\}` with `(1,2)`): sets are unordered and tuples ordered, so equating them
  makes `(1,2)` ≡ `\\{2,1\\}` ≡ `(2,1)`; a bare list `1, 2` (how the golds write "the
  values are 1 and 2") still matches either.
"""

from __future__ import annotations

import re

__all__ = ["shape", "to_latex", "normalize", "strip_delimiters"]

_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\{\s*([^{}]*?)\s*\}")
_SCI_E_RE = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
_DOLLAR_RE = re.compile(r"(?<!\\)\$")
_SUB_E_RE = re.compile(r"(?<![\\A-Za-z])([Ee])(?=\s*_)")


def strip_delimiters(answer: str) -> str:
    """The answer without `$` delimiters, `\\(…\\)` / `\\[…\\]` around it, or a final period."""
    s = _DOLLAR_RE.sub("", answer).strip()
    for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right):
            s = s[len(left) : -len(right)].strip()
    s = re.sub(r"^\\(?:quad|qquad|displaystyle)\b\s*", "", s)
    return s[:-1].rstrip() if s.endswith(".") and not re.search(r"\d\.$", s) else s


def normalize(answer: str) -> str:
    """A cheap canonical string: equal strings are equivalent answers without parsing."""
    s = strip_delimiters(answer)
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
        ("\\%", "%"),
    ):
        s = s.replace(old, new)
    s = _TEXT_RE.sub(r"\1", s)
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def to_latex(answer: str) -> str:
    """The LaTeX math-verify parses for this answer (see the module docstring)."""
    s = strip_delimiters(answer)
    s = _SCI_E_RE.sub(lambda m: f"{m.group(1)}\\times10^{{{int(m.group(2))}}}", s)
    s = re.sub(r"(?<!\\)%", r"\\%", s)
    s = re.sub(r"(\d)\.(?=\s*/)", r"\1", s)  # -1./3
    s = re.sub(r"\bnp\.(arcsin|arccos|arctan|sin|cos|tan|exp|log|sqrt|pi)\b", r"\\\1", s)
    s = _SUB_E_RE.sub(r"\\mathcal{\1}", s)
    return s


def _one_tuple(s: str) -> bool:
    """s is one bracketed group `(…)` / `[…]` (an interval may mix them) with a comma in it."""
    depth, comma = 0, False
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return False  # `(1,2), (3,4)`: a list of tuples
        elif ch == "," and depth == 1:
            comma = True
    return comma and s[:1] in "([" and s[-1:] in ")]"


def shape(answer: str) -> str:
    """`set`, `tuple` or `other` (see the module docstring)."""
    s = strip_delimiters(answer).replace("\\left", "").replace("\\right", "").strip()
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set"
    if _one_tuple(s):
        return "tuple"
    return "other"
